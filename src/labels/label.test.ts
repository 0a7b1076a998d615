import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  LabelError,
  LabelErrorCode,
  LabelSet,
  LabelSource,
  cidrLabel,
  formatLabel,
  makeLabel,
  parseLabel,
  parseSelectLabel,
} from './index.js';
import { parsePrefix } from '../netip/index.js';

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
    return undefined;
  } catch (err) {
    assert.ok(err instanceof LabelError, `expected a LabelError, got ${String(err)}`);
    return err.code;
  }
}

describe('parseLabel / formatLabel', () => {
  test('Cilium forms round-trip', () => {
    for (const text of [
      'k8s:app=web',
      'reserved:host',
      'any:key',
      'container:com.docker.compose.project=shop',
      'k8s:io.kubernetes.pod.namespace=default',
      'k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=default',
      'cidr:10.0.0.0/8',
      'unspec:tier=db',
    ]) {
      assert.equal(formatLabel(parseLabel(text)), text);
    }
  });

  test('no source means unspec for labels and any for selectors', () => {
    assert.deepEqual(parseLabel('app=web'), { source: 'unspec', key: 'app', value: 'web' });
    assert.deepEqual(parseSelectLabel('app=web'), { source: 'any', key: 'app', value: 'web' });
    assert.deepEqual(parseLabel('app'), { source: 'unspec', key: 'app', value: '' });
  });

  test('a value may contain ":" only after "="', () => {
    assert.equal(codeOf(() => parseLabel('app=a:b')), LabelErrorCode.INVALID_VALUE);
  });

  test('IPv6 cidr labels use "-" for ":" and are canonical', () => {
    const l = parseLabel('cidr:2001:db8::/32');
    assert.equal(formatLabel(l), 'cidr:2001-db8--0/32');
    assert.equal(formatLabel(parseLabel('cidr:2001-db8--0/32')), 'cidr:2001-db8--0/32');
    assert.equal(formatLabel(cidrLabel(parsePrefix('::/0'))), 'cidr:0--0/0');
    assert.equal(codeOf(() => parseLabel('cidr:10.0.0.1/8')), LabelErrorCode.INVALID_KEY);
  });

  test('bad labels are rejected with stable codes', () => {
    const cases: Array<[string, string]> = [
      ['bogus:app=web', LabelErrorCode.INVALID_SOURCE],
      ['k8s:=web', LabelErrorCode.INVALID_KEY],
      ['k8s:-app=web', LabelErrorCode.INVALID_KEY],
      ['k8s:app web=x', LabelErrorCode.INVALID_KEY],
      ['k8s:Example.COM/app=x', LabelErrorCode.INVALID_KEY],
      [`k8s:${'a'.repeat(64)}=x`, LabelErrorCode.KEY_TOO_LONG],
      [`k8s:${'a'.repeat(254)}/app=x`, LabelErrorCode.KEY_TOO_LONG],
      [`k8s:app=${'v'.repeat(64)}`, LabelErrorCode.VALUE_TOO_LONG],
      ['k8s:app=-web', LabelErrorCode.INVALID_VALUE],
      ['k8s:app=we b', LabelErrorCode.INVALID_VALUE],
      ['reserved:nope', LabelErrorCode.INVALID_KEY],
      ['reserved:host=1', LabelErrorCode.INVALID_VALUE],
      ['', LabelErrorCode.INVALID_KEY],
    ];
    for (const [text, code] of cases) assert.equal(codeOf(() => parseLabel(text)), code, text);
  });

  test('errors name the input and the limit', () => {
    assert.throws(
      () => parseLabel(`k8s:app=${'v'.repeat(70)}`),
      (err: unknown) => {
        assert.ok(err instanceof LabelError);
        assert.match(err.message, /70 characters, the limit is 63/);
        assert.equal(err.input, `k8s:app=${'v'.repeat(70)}`);
        return true;
      },
    );
  });

  test('limits are inclusive', () => {
    makeLabel('k8s', 'a'.repeat(63), 'v'.repeat(63));
    makeLabel('k8s', `${'a'.repeat(253)}/b`, '');
  });
});

const nameArb = fc.stringMatching(/^[a-z0-9]([-a-z0-9_.]{0,20}[a-z0-9])?$/);
const labelArb = fc
  .tuple(fc.constantFrom('k8s', 'container', 'unspec'), nameArb, fc.option(nameArb, { nil: '' }))
  .map(([s, k, v]) => makeLabel(s, k, v));

describe('LabelSet', () => {
  test('sorted, stable string form independent of input order', () => {
    const a = LabelSet.parse(['k8s:zone=b', 'k8s:app=web', 'reserved:host']);
    const b = LabelSet.parse(['reserved:host', 'k8s:app=web', 'k8s:zone=b']);
    assert.equal(a.toString(), 'k8s:app=web;k8s:zone=b;reserved:host;');
    assert.equal(a.toString(), b.toString());
    assert.ok(a.equals(b));
  });

  test('fromSortedString inverts toString (property)', () => {
    fc.assert(
      fc.property(fc.uniqueArray(labelArb, { selector: (l) => `${l.source}:${l.key}` }), (labels) => {
        const set = LabelSet.from(labels);
        assert.equal(LabelSet.fromSortedString(set.toString()).toString(), set.toString());
        const shuffled = LabelSet.from([...labels].reverse());
        assert.equal(shuffled.toString(), set.toString());
      }),
    );
  });

  test('same key twice with different values is an error; exact repeats are dropped', () => {
    assert.equal(codeOf(() => LabelSet.parse(['k8s:app=a', 'k8s:app=b'])), LabelErrorCode.DUPLICATE_KEY);
    assert.equal(LabelSet.parse(['k8s:app=a', 'k8s:app=a']).size, 1);
    assert.equal(LabelSet.parse(['k8s:app=a', 'container:app=b']).size, 2);
  });

  test('immutable: with/without return new sets', () => {
    const a = LabelSet.fromRecord(LabelSource.K8s, { app: 'web', tier: 'fe' });
    const b = a.with([makeLabel('k8s', 'app', 'api')]).without('tier');
    assert.equal(a.toString(), 'k8s:app=web;k8s:tier=fe;');
    assert.equal(b.toString(), 'k8s:app=api;');
    assert.throws(() => (a.toArray() as unknown as unknown[]).push(1));
    assert.deepEqual(a.toRecord(LabelSource.K8s), { app: 'web', tier: 'fe' });
    assert.deepEqual(JSON.parse(JSON.stringify(a)), ['k8s:app=web', 'k8s:tier=fe']);
  });

  test('any: matches every source', () => {
    const set = LabelSet.parse(['container:app=web']);
    assert.ok(set.matches(parseSelectLabel('app=web')));
    assert.ok(!set.matches(parseLabel('k8s:app=web')));
    assert.ok(set.has('app'));
    assert.ok(!set.has('app', LabelSource.K8s));
  });
});
