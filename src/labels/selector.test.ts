import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { LabelError, LabelErrorCode, LabelSelector, LabelSet, matchesLabel, selectorMatches } from './index.js';

const web = LabelSet.parse(['k8s:app=web', 'k8s:tier=fe', 'k8s:io.kubernetes.pod.namespace=shop']);
const db = LabelSet.parse(['container:app=db', 'k8s:io.kubernetes.pod.namespace=shop']);
const host = LabelSet.parse(['reserved:host']);

describe('LabelSelector', () => {
  test('matchLabels, any-source keys and source-scoped keys', () => {
    assert.ok(selectorMatches({ matchLabels: { app: 'web' } }, web));
    assert.ok(selectorMatches({ matchLabels: { app: 'db' } }, db));
    assert.ok(!selectorMatches({ matchLabels: { 'k8s:app': 'db' } }, db));
    assert.ok(selectorMatches({ matchLabels: { 'container:app': 'db' } }, db));
    assert.ok(selectorMatches({ matchLabels: { 'reserved:host': '' } }, host));
    assert.ok(!selectorMatches({ matchLabels: { 'reserved:host': '' } }, web));
  });

  test('matchExpressions In/NotIn/Exists/DoesNotExist', () => {
    const s = (op: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist', values?: string[]) =>
      LabelSelector.parse({ matchExpressions: [{ key: 'tier', operator: op, ...(values ? { values } : {}) }] });
    assert.ok(s('In', ['fe', 'be']).matches(web));
    assert.ok(!s('In', ['be']).matches(web));
    assert.ok(!s('NotIn', ['fe']).matches(web));
    assert.ok(s('NotIn', ['fe']).matches(db), 'NotIn holds when the key is absent');
    assert.ok(s('Exists').matches(web));
    assert.ok(!s('Exists').matches(db));
    assert.ok(s('DoesNotExist').matches(db));
  });

  test('requirements AND together; empty selects all', () => {
    const sel = LabelSelector.parse({
      matchLabels: { 'k8s:io.kubernetes.pod.namespace': 'shop' },
      matchExpressions: [{ key: 'app', operator: 'In', values: ['web'] }],
    });
    assert.ok(sel.matches(web));
    assert.ok(!sel.matches(db));
    assert.ok(LabelSelector.parse({}).matches(host));
    assert.ok(LabelSelector.ALL.isEmpty());
  });

  test('stable string form regardless of spelling order', () => {
    const a = LabelSelector.parse({ matchLabels: { b: '1', a: '2' } });
    const b = LabelSelector.parse({ matchExpressions: [{ key: 'a', operator: 'In', values: ['2'] }], matchLabels: { b: '1' } });
    assert.equal(a.toString(), b.toString());
    assert.equal(a.toString(), 'any:a=2,any:b=1');
    assert.ok(LabelSelector.parse(a.toSpec()).toString() === a.toString());
  });

  test('invalid selectors are rejected with clear errors', () => {
    const bad: unknown[] = [
      { matchExpressions: [{ key: 'a', operator: 'Maybe' }] },
      { matchExpressions: [{ key: 'a', operator: 'In', values: [] }] },
      { matchExpressions: [{ key: 'a', operator: 'Exists', values: ['x'] }] },
      { matchLabels: { 'bad key': 'x' } },
      { matchLabels: { a: 'bad value' } },
      { matchLabels: { 'reserved:host': 'x' } },
    ];
    for (const spec of bad) {
      assert.throws(
        () => LabelSelector.parse(spec as never),
        (err: unknown) => err instanceof LabelError && Object.values(LabelErrorCode).includes(err.code),
        JSON.stringify(spec),
      );
    }
  });

  test('matchesLabel helper', () => {
    assert.ok(matchesLabel(db, 'app=db'));
    assert.ok(matchesLabel(db, 'any:app=db'));
    assert.ok(!matchesLabel(db, 'k8s:app=db'));
  });
});
