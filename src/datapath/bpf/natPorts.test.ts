import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { configNatPorts, LINUX_EPHEMERAL_RANGE, NatPortRangeError, natPortRanges, nodeNatPortRanges, NODEPORT_RANGE, parsePortRange, readEphemeralRange } from './natPorts.js';

describe('SNAT port ranges', () => {
  it('by default: 1024-65535 less Linux\'s ephemeral range and the NodePort range', () => {
    assert.deepEqual(nodeNatPortRanges('1024-65535', LINUX_EPHEMERAL_RANGE), [
      { min: 1024, max: 29999 },
      { min: 61000, max: 65535 },
    ]);
  });

  it('follows the node\'s own ephemeral range, and keeps the two widest pieces', () => {
    assert.deepEqual(natPortRanges([1024, 65535], [[40000, 50000], NODEPORT_RANGE]), [
      [1024, 29999],
      [50001, 65535],
    ]);
  });

  it('a range wholly outside the node\'s ports is taken as it is', () => {
    assert.deepEqual(nodeNatPortRanges('61000-61999', LINUX_EPHEMERAL_RANGE), [{ min: 61000, max: 61999 }]);
  });

  it('refuses a range the node\'s own ports cover whole, and malformed ranges', () => {
    assert.throws(() => nodeNatPortRanges('33000-34000', LINUX_EPHEMERAL_RANGE), NatPortRangeError);
    for (const bad of ['', '1024', '0-100', '2000-1000', '1-65536', 'a-b', '1024-65535 ']) {
      if (bad.trim() === '1024-65535') continue;
      assert.throws(() => parsePortRange(bad), NatPortRangeError, bad);
    }
  });

  it('reads the ephemeral range from /proc, Linux\'s default when it cannot', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tdl-natports-'));
    try {
      writeFileSync(join(dir, 'range'), '20000\t40000\n');
      assert.deepEqual(readEphemeralRange(join(dir, 'range')), [20000, 40000]);
      writeFileSync(join(dir, 'bad'), 'garbage\n');
      assert.deepEqual(readEphemeralRange(join(dir, 'bad')), LINUX_EPHEMERAL_RANGE);
      assert.deepEqual(readEphemeralRange(join(dir, 'missing')), LINUX_EPHEMERAL_RANGE);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('fills the config\'s slots: ranges first, then empty ones', () => {
    assert.deepEqual(configNatPorts([{ min: 5, max: 6 }]), [
      { min: 5, max: 6 },
      { min: 0, max: 0 },
    ]);
  });
});
