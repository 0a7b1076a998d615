import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { decodeValue, encodeValue } from './codec.js';

describe('kvstore ipcache value', () => {
  test('a value round-trips; fields it does not know are dropped', () => {
    const v = { identity: 1, hostIP: '192.0.2.1', node: 'n1', owner: 'endpoint:7' };
    assert.deepEqual(decodeValue(encodeValue(v)), v);
    assert.deepEqual(decodeValue(JSON.stringify({ ...v, later: true })), v);
    const dual = { ...v, hostIP6: '2001:db8::1' };
    assert.deepEqual(decodeValue(encodeValue(dual)), dual);
  });

  test('an unusable value names every field that is wrong, with what it holds', () => {
    assert.equal(decodeValue('{'), 'value is not JSON');
    assert.match(decodeValue('7') as string, /^value 7: /);
    const reason = decodeValue(JSON.stringify({ identity: 70000, hostIP: '192.0.2', node: '', owner: 'o' }));
    assert.equal(reason, 'identity 70000: is not a cluster-wide identity; hostIP "192.0.2": is not an IP; node "": is missing');
    assert.equal(decodeValue(JSON.stringify({ identity: 1, hostIP: '192.0.2.1', hostIP6: '192.0.2.2', node: 'n', owner: 'o' })), 'hostIP6 "192.0.2.2": is not an IPv6 address');
  });
});
