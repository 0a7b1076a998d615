/**
 * Every program of every datapath object, built by every supported
 * compiler, loads and uses at most half of the verifier's budget. The
 * table of counts is printed on every run.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { BPF_COMPILERS, BUDGET_OBJECT_FILES, formatCounts, measureAll, VERIFIER_INSN_BUDGET, withinBudget } from './verifierBudget.js';

requireRoot('the verifier budget test');

describe('verifier budget', () => {
  it('every program of every object loads with each compiler within half of the verifier budget', async () => {
    const counts = await measureAll();
    console.log(formatCounts(counts));
    for (const compiler of BPF_COMPILERS) {
      for (const object of BUDGET_OBJECT_FILES) {
        assert.ok(counts.some((c) => c.compiler === compiler && c.object === object), `${compiler} ${object}: no program measured`);
      }
    }
    const over = counts.filter((c) => !withinBudget(c));
    assert.deepEqual(
      over.map((c) => `${c.compiler} ${c.object} ${c.program}: ${c.insns ?? '?'} insns${c.error ? ` (${c.error})` : ''}`),
      [],
      `programs over the budget of ${VERIFIER_INSN_BUDGET} processed instructions`,
    );
  });
});
