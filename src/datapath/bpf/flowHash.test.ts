/**
 * flowHash4 is MurmurHash3 (x86, 32 bits, seed 0) of the tuple's four
 * host-order words laid out little-endian, as lb4_flow_hash computes it
 * (lb.test.ts holds the C side to this one through Maglev selection).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { flowHash4, maglevSlot } from './flowHash.js';

/** A byte-wise MurmurHash3_x86_32, written from the algorithm's description as an independent reference. */
function murmur3(bytes: Uint8Array, seed: number): number {
  let h = seed >>> 0;
  const blocks = Math.floor(bytes.length / 4);
  for (let i = 0; i < blocks; i++) {
    let k = (bytes[4 * i]! | (bytes[4 * i + 1]! << 8) | (bytes[4 * i + 2]! << 16) | (bytes[4 * i + 3]! << 24)) >>> 0;
    k = Math.imul(k, 0xcc9e2d51);
    k = ((k << 15) | (k >>> 17)) >>> 0;
    k = Math.imul(k, 0x1b873593);
    h ^= k;
    h = ((h << 13) | (h >>> 19)) >>> 0;
    h = (Math.imul(h, 5) + 0xe6546b64) >>> 0;
  }
  const tail = blocks * 4;
  const rest = bytes.length & 3;
  if (rest > 0) {
    let k = 0;
    for (let i = rest - 1; i >= 0; i--) k ^= bytes[tail + i]! << (8 * i);
    k = Math.imul(k, 0xcc9e2d51);
    k = ((k << 15) | (k >>> 17)) >>> 0;
    k = Math.imul(k, 0x1b873593);
    h ^= k;
  }
  h ^= bytes.length;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

function words(...ws: number[]): Uint8Array {
  const b = Buffer.alloc(4 * ws.length);
  ws.forEach((w, i) => b.writeUInt32LE(w >>> 0, 4 * i));
  return b;
}

describe('flowHash4', () => {
  it('matches the reference MurmurHash3 on known inputs and the tuple encoding', () => {
    // Published MurmurHash3_x86_32 vectors.
    assert.equal(murmur3(new Uint8Array(0), 0), 0);
    assert.equal(murmur3(new Uint8Array(0), 1), 0x514e28b7);
    assert.equal(murmur3(Buffer.from('Hello, world!'), 1234), 0xfaf6cdb3);
    const tuples = [
      { saddr: '10.200.0.10', daddr: '10.96.0.10', sport: 40000, dport: 80, proto: 6 },
      { saddr: '192.168.77.5', daddr: '192.168.77.5', sport: 1, dport: 30080, proto: 17 },
      { saddr: '0.0.0.0', daddr: '255.255.255.255', sport: 65535, dport: 0, proto: 132 },
    ];
    const word = (ip: string): number => ip.split('.').reduce((a, p) => ((a << 8) | Number(p)) >>> 0, 0);
    for (const t of tuples) {
      assert.equal(flowHash4(t), murmur3(words(word(t.saddr), word(t.daddr), (t.sport << 16) | t.dport, t.proto), 0), JSON.stringify(t));
    }
  });

  it('spreads ports over a prime table and rejects what is no tuple', () => {
    const counts = new Array<number>(251).fill(0);
    for (let sport = 1024; sport < 1024 + 251 * 40; sport++) counts[maglevSlot({ saddr: '10.200.0.10', daddr: '10.96.0.10', sport, dport: 80, proto: 6 }, 251)]!++;
    assert.ok(Math.min(...counts) >= 15 && Math.max(...counts) <= 70, `slot counts ${Math.min(...counts)}..${Math.max(...counts)} around 40`);
    assert.throws(() => flowHash4({ saddr: 'fe80::1', daddr: '10.0.0.1', sport: 1, dport: 1, proto: 6 }), RangeError);
    assert.throws(() => flowHash4({ saddr: '10.0.0.1', daddr: '10.0.0.1', sport: 70000, dport: 1, proto: 6 }), RangeError);
    assert.throws(() => maglevSlot({ saddr: '10.0.0.1', daddr: '10.0.0.1', sport: 1, dport: 1, proto: 6 }, 0), RangeError);
  });
});
