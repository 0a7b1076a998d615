import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { KvstoreErrorCode, isKvstoreError } from './errors.js';
import { identityValueKey, ipamAffinityKey, ipcacheKey, IPCACHE_PREFIX, ROOT } from './keys.js';
import { MAX_KEY_BYTES, prefixRangeEnd, validateKey, validateTxn, validateValue } from './validate.js';

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
    return undefined;
  } catch (err) {
    assert.ok(isKvstoreError(err), String(err));
    return err.code;
  }
}

const utf8 = (s: string): Buffer => Buffer.from(s, 'utf8');

describe('kvstore key ranges', () => {
  it('[prefix, prefixRangeEnd(prefix)) in UTF-8 byte order holds exactly the keys with that prefix', () => {
    const str = fc.string({ unit: 'binary', maxLength: 6 });
    fc.assert(
      fc.property(str, str, fc.boolean(), (prefix, tail, extend) => {
        const key = extend ? prefix + tail : tail;
        const end = prefixRangeEnd(prefix);
        const inRange = Buffer.compare(utf8(key), utf8(prefix)) >= 0 && (end === undefined || Buffer.compare(utf8(key), utf8(end)) < 0);
        assert.equal(inRange, key.startsWith(prefix), JSON.stringify({ prefix, key, end }));
      }),
      { numRuns: 2000 },
    );
  });

  it('handles the edges of the code point space', () => {
    assert.equal(prefixRangeEnd(''), undefined);
    assert.equal(prefixRangeEnd('a/'), 'a0');
    assert.equal(prefixRangeEnd('a\u{d7ff}'), 'a\u{e000}');
    assert.equal(prefixRangeEnd('a\u{10ffff}'), 'b');
    assert.equal(prefixRangeEnd('\u{10ffff}'), undefined);
  });
});

describe('kvstore input validation', () => {
  it('rejects empty, oversized, NUL-bearing and ill-formed keys', () => {
    assert.equal(codeOf(() => validateKey('')), KvstoreErrorCode.INVALID_KEY);
    assert.equal(codeOf(() => validateKey('a'.repeat(MAX_KEY_BYTES + 1))), KvstoreErrorCode.INVALID_KEY);
    assert.equal(codeOf(() => validateKey('é'.repeat(MAX_KEY_BYTES / 2 + 1))), KvstoreErrorCode.INVALID_KEY, 'the limit counts bytes');
    assert.equal(codeOf(() => validateKey('a\0')), KvstoreErrorCode.INVALID_KEY);
    assert.equal(codeOf(() => validateKey('a\ud800')), KvstoreErrorCode.INVALID_KEY);
    assert.equal(codeOf(() => validateKey(42)), KvstoreErrorCode.INVALID_KEY);
    assert.equal(codeOf(() => validateKey('tendril/😀')), undefined);
  });

  it('bounds values in bytes and types', () => {
    assert.equal(codeOf(() => validateValue('x'.repeat(2 * 1024 * 1024))), KvstoreErrorCode.VALUE_TOO_LARGE);
    assert.equal(codeOf(() => validateValue(undefined)), KvstoreErrorCode.INVALID_ARGUMENT);
    assert.equal(codeOf(() => validateValue('')), undefined);
  });

  it('rejects malformed transactions before anything is applied', () => {
    const bad = [
      { compare: [{ key: 'k', target: 'size', value: 1 }], success: [] },
      { compare: [{ key: 'k', target: 'value', op: '>=', value: 'x' }], success: [] },
      { compare: [], success: [{ type: 'get', key: 'k' }] },
      { compare: [], success: [{ type: 'deletePrefix', prefix: 'a/' }, { type: 'put', key: 'a/b', value: '' }] },
      { compare: [], success: Array.from({ length: 200 }, (_, i) => ({ type: 'delete', key: `k${i}` })) },
    ];
    for (const t of bad) {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any -- deliberately ill-typed input
      assert.equal(codeOf(() => validateTxn(t as any)), KvstoreErrorCode.INVALID_ARGUMENT, JSON.stringify(t).slice(0, 80));
    }
  });
});

describe('kvstore key layout', () => {
  it('keeps every key under tendril/ with a versioned kind', () => {
    assert.ok(IPCACHE_PREFIX.startsWith(ROOT));
    assert.equal(ipcacheKey('10.0.0.1'), 'tendril/state/ip/v1/10.0.0.1');
    assert.equal(identityValueKey('k8s:app=web;k8s:ns=default', 'node-1'), 'tendril/state/identities/v1/value/k8s:app=web;k8s:ns=default/node-1');
    assert.equal(ipamAffinityKey('node-1', '10.0.1.0/26'), 'tendril/ipam/v1/affinity/node-1/10.0.1.0/26');
  });
});
