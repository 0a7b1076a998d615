import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { decodeStoredPolicy, encodeStoredPolicy } from './storedPolicy.js';

describe('stored policy value', () => {
  test('a value round-trips with its hash', () => {
    const { value, hash } = encodeStoredPolicy({ kind: 'TendrilNetworkPolicy', metadata: { name: 'a' } });
    assert.deepEqual(decodeStoredPolicy(value), { hash, document: { kind: 'TendrilNetworkPolicy', metadata: { name: 'a' } } });
  });

  test('an unusable value says which field is wrong', () => {
    assert.equal(decodeStoredPolicy('x'), 'not JSON');
    assert.equal(decodeStoredPolicy('{"v":2,"hash":"h","document":{}}'), 'v 2: unknown format');
    assert.equal(decodeStoredPolicy('{"v":1,"hash":5}'), 'hash 5: Invalid input: expected string, received number; document undefined: is missing');
    assert.equal(decodeStoredPolicy('{"v":1,"hash":"00","document":{}}'), 'the document does not match its hash');
  });
});
