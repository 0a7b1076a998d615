/**
 * The datapath's C unit tests (bpf/tests/*.c): each test object's
 * PKTGEN/SETUP/CHECK tests run in the kernel through BPF_PROG_TEST_RUN, one
 * subtest per C test, failing with the file, line and assertion CHECK
 * recorded.
 */
import assert from 'node:assert/strict';
import { basename, join } from 'node:path';
import { describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { loadUnitTests, runUnitTest, unitTestObjects, unitTestsOf, UNIT_TEST_DIR, type UnitTestOutcome } from './testing/bpfUnit.js';

requireRoot('the BPF unit tests');

const objects = unitTestObjects();

describe('bpf/tests', () => {
  it('has test objects built (make build)', () => {
    assert.ok(objects.length > 0, `no test objects in ${UNIT_TEST_DIR}`);
  });

  it('refuses a PKTGEN or SETUP without its CHECK', () => {
    assert.throws(() => unitTestsOf(['test__a__pktgen', 'test__a__check', 'test__b__setup']), /test b has setup but no CHECK/);
    assert.deepEqual(unitTestsOf(['test__a__pktgen', 'test__a__check', 'other']), [{ name: 'a', pktgen: 'test__a__pktgen', check: 'test__a__check' }]);
  });

  // bpf/tests/selftest/runner.c: tests that pass, fail and error on purpose.
  it('reports what each C test did: passes, failed assertions with line and values, errors', async () => {
    const path = join(UNIT_TEST_DIR, 'selftest', 'runner.o');
    const { tests, sizes } = await loadUnitTests(path);
    const outcome = new Map<string, UnitTestOutcome>();
    for (const t of tests) outcome.set(t.name, await runUnitTest(path, t, sizes));
    assert.deepEqual([...outcome.keys()].sort(), [
      'asserts_nothing', 'fails_assert', 'fails_eq_negative', 'fails_long_expression', 'fresh_maps_a', 'fresh_maps_b', 'passes', 'pktgen_fails', 'stages_chain',
    ]);
    assert.deepEqual(outcome.get('passes'), { passed: true, checks: 3, message: '' });
    assert.deepEqual(outcome.get('fails_assert'), { passed: false, checks: 2, message: 'line 32 `ASSERT(three + 1 == 5);`: three + 1 == 5' });
    assert.deepEqual(outcome.get('fails_eq_negative'), { passed: false, checks: 1, message: 'line 38 `ASSERT_EQ(-7, 7);`: -7 == 7 (got -7, want 7)' });
    const long = outcome.get('fails_long_expression')!;
    assert.equal(long.passed, false);
    assert.match(long.message, /^line 44 `.*`: skb->len == 0 && skb->len == 1 && .*$/);
    assert.equal(long.message.split(': ').slice(1).join(': ').length, 95, 'the expression cut to TEST_EXPR_LEN - 1 characters');
    assert.deepEqual(outcome.get('asserts_nothing'), { passed: false, checks: 0, message: 'CHECK passed without one assertion' });
    assert.deepEqual(outcome.get('pktgen_fails'), { passed: false, checks: 0, message: 'PKTGEN returned 3, not TEST_PASS: no packet' });
    // The frame PKTGEN built, as SETUP changed it, and SETUP's return value reach CHECK.
    assert.deepEqual(outcome.get('stages_chain'), { passed: true, checks: 5, message: '' });
    // Each test runs on its own load: both find the map empty.
    assert.equal(outcome.get('fresh_maps_a')?.passed, true);
    assert.equal(outcome.get('fresh_maps_b')?.passed, true);
  });
});

for (const path of objects) {
  const file = `bpf/tests/${basename(path, '.o')}.c`;
  // A program the verifier refuses (or a test without CHECK) fails this file's first subtest, not the module.
  const loaded = await loadUnitTests(path).then(
    (ok) => ({ ok, error: undefined }),
    (error: unknown) => ({ ok: undefined, error }),
  );
  describe(file, () => {
    it('loads, with tests', () => {
      if (!loaded.ok) throw loaded.error;
      assert.ok(loaded.ok.tests.length > 0, `${file} defines no CHECK`);
    });
    const { tests, sizes } = loaded.ok ?? { tests: [], sizes: {} };
    for (const t of tests) {
      it(t.name, async () => {
        const outcome = await runUnitTest(path, t, sizes);
        if (!outcome.passed) assert.fail(`${file} ${outcome.message}`);
      });
    }
  });
}
