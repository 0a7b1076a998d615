import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { IpamError } from '../ipam/errors.js';
import { CidrPool } from './cidrPool.js';
import { parseDuration } from './config.js';

const pool = (cidrs: string[], m4 = 24, m6 = 112) => new CidrPool({ cidrs, maskSize: { 4: m4, 6: m6 } });

describe('CidrPool', () => {
  test('hands out distinct per-node CIDRs in pool order, per family, until full', () => {
    const p = pool(['10.1.0.0/23', '10.2.0.0/24', 'fd00:1::/111']);
    assert.deepEqual(p.families(), [4, 6]);
    assert.deepEqual(['a', 'b', 'c'].map((n) => p.allocate(n, 4)), ['10.1.0.0/24', '10.1.1.0/24', '10.2.0.0/24']);
    assert.equal(p.allocate('d', 4), undefined, 'full');
    assert.deepEqual(['a', 'b'].map((n) => p.allocate(n, 6)), ['fd00:1::/112', 'fd00:1::1:0/112']);
    assert.equal(p.allocate('c', 6), undefined);
    assert.deepEqual(p.allocated(), { 4: 3, 6: 2 });
    p.release('b');
    assert.equal(p.ownerOf('10.1.1.0/24'), undefined);
    assert.equal(p.allocate('d', 4), '10.1.1.0/24', "b's CIDR is free again");
    assert.equal(p.allocate('d', 6), 'fd00:1::1:0/112');
  });

  test('rebuild takes what nodes hold; foreign CIDRs are reported, and the in-pool ones never handed out', () => {
    const p = pool(['10.1.0.0/22']);
    const foreign = p.rebuild([
      { name: 'a', cidrs: ['10.1.2.0/24'] },
      { name: 'b', cidrs: ['192.168.0.0/24'] },
      { name: 'c', cidrs: ['10.1.2.0/24'] },
      { name: 'd', cidrs: ['10.1.0.128/25'] },
      { name: 'e', cidrs: ['bogus'] },
    ]);
    assert.deepEqual(
      foreign.map((f) => `${f.node} ${f.cidr} ${f.why}`),
      ['b 192.168.0.0/24 outside the pools', 'c 10.1.2.0/24 held by another node too', 'd 10.1.0.128/25 not a per-node CIDR of its pool', 'e bogus not a CIDR'],
    );
    assert.equal(p.ownerOf('10.1.2.0/24'), 'a');
    // 10.1.0.0/24 overlaps d's /25; 10.1.2.0/24 is a's.
    assert.deepEqual([p.allocate('x', 4), p.allocate('y', 4), p.allocate('z', 4)], ['10.1.1.0/24', '10.1.3.0/24', undefined]);
    p.release('d');
    assert.equal(p.allocate('z', 4), '10.1.0.0/24');
  });

  test('a huge IPv6 pool with a large foreign block inside is searched past the block at once', () => {
    const p = pool(['fd00::/48']);
    p.rebuild([{ name: 'a', cidrs: ['fd00::/64'] }]);
    assert.equal(p.allocate('b', 6), 'fd00:0:0:1::/112');
  });

  test('bad pools are IpamErrors: not a CIDR, overlapping, a mask shorter than the pool', () => {
    assert.throws(() => pool(['10.0.0.0/33']), IpamError);
    assert.throws(() => pool(['10.0.0.0/16', '10.0.128.0/17']), /overlap/);
    assert.throws(() => pool(['10.0.0.0/16'], 8), /does not fit/);
  });
});

test('parseDuration: Go-style units', () => {
  assert.deepEqual(['500ms', '30s', '15m', '1h', '1.5s'].map(parseDuration), [500, 30_000, 900_000, 3_600_000, 1500]);
  for (const bad of ['15', '15 m', 'm', '-1s', '1d']) assert.equal(parseDuration(bad), undefined, bad);
});
