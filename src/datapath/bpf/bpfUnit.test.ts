/**
 * The datapath's C unit tests (bpf/tests/*.c): each test object's
 * PKTGEN/SETUP/CHECK tests run in the kernel through BPF_PROG_TEST_RUN, one
 * subtest per C test, failing with the file, line and assertion CHECK
 * recorded.
 */
import assert from 'node:assert/strict';
import { basename } from 'node:path';
import { describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { loadUnitTests, runUnitTest, unitTestObjects, unitTestsOf, UNIT_TEST_DIR } from './testing/bpfUnit.js';

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
