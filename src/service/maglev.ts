/**
 * Maglev consistent hashing (Eisenbud et al., NSDI 2016): a lookup table of
 * a prime size M in which every backend owns about its weighted share of the
 * slots, so that adding or removing one backend moves few flows that were
 * not its own. Each backend walks its own permutation of the slots (an
 * offset and a skip from two independent hashes of a key that does not
 * depend on anything node-local, so every node builds the same table) and
 * claims the next free slot of it when its turn comes.
 */
import { createHash } from 'node:crypto';
import { MAGLEV_DEFAULT_TABLE_SIZE } from '../datapath/limits.js';

export { MAGLEV_DEFAULT_TABLE_SIZE };

/** Table sizes `--lb-maglev-table-size` accepts (primes only). */
export const MAGLEV_MIN_TABLE_SIZE = 251;
export const MAGLEV_MAX_TABLE_SIZE = 131071;

export interface MaglevBackend {
  /** What the table holds for this backend (the datapath's backend ID). */
  id: number;
  /** Stable across nodes and restarts (address, port, protocol): the permutation derives from it. */
  key: string;
  /** Relative share; 0 = no slots. */
  weight: number;
}

export function isPrime(n: number): boolean {
  if (!Number.isInteger(n) || n < 2) return false;
  if (n % 2 === 0) return n === 2;
  for (let d = 3; d * d <= n; d += 2) if (n % d === 0) return false;
  return true;
}

/** Whether `n` is a table size the agent accepts. */
export function isValidMaglevTableSize(n: number): boolean {
  return Number.isInteger(n) && n >= MAGLEV_MIN_TABLE_SIZE && n <= MAGLEV_MAX_TABLE_SIZE && isPrime(n);
}

/** The backend's permutation parameters: two independent 32-bit hashes of its key (SHA-256 words, so no seed tuning). */
export function maglevPermutation(key: string, size: number): { offset: number; skip: number } {
  const d = createHash('sha256').update(key).digest();
  const h1 = d.readUInt32BE(0);
  const h2 = d.readUInt32BE(4);
  return { offset: h1 % size, skip: (h2 % (size - 1)) + 1 };
}

/**
 * The table: backend ID per slot. Backends are taken in key order (the
 * caller's order does not matter). Turns are weighted: in round r a backend
 * of weight w takes a turn when floor((r+1)·w/W) > floor(r·w/W), W the
 * largest weight, so over the rounds each backend's turns, and so its
 * slots, follow its weight. Backends of weight 0 get no slot; with no
 * weighted backend the table is empty (length 0).
 */
export function buildMaglevTable(backends: readonly MaglevBackend[], size: number = MAGLEV_DEFAULT_TABLE_SIZE): Uint32Array {
  if (!isPrime(size)) throw new RangeError(`Maglev table size ${size} is not a prime`);
  const live = backends.filter((b) => b.weight > 0).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  if (live.length === 0) return new Uint32Array(0);
  const n = live.length;
  // Each backend's next candidate slot, walked as offset, offset+skip, … (mod size) without multiplying.
  const pos = new Int32Array(n);
  const skip = new Int32Array(n);
  const weight = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const p = maglevPermutation(live[i]!.key, size);
    pos[i] = p.offset;
    skip[i] = p.skip;
    weight[i] = live[i]!.weight;
  }
  const maxWeight = Math.max(...weight);
  const table = new Uint32Array(size);
  const filled = new Uint8Array(size);
  let count = 0;
  for (let round = 0; count < size; round++) {
    for (let i = 0; i < n && count < size; i++) {
      const w = weight[i]!;
      if (w !== maxWeight && Math.floor(((round + 1) * w) / maxWeight) === Math.floor((round * w) / maxWeight)) continue;
      // The backend's next preferred slot that is still free.
      let slot = pos[i]!;
      while (filled[slot] === 1) {
        slot += skip[i]!;
        if (slot >= size) slot -= size;
      }
      filled[slot] = 1;
      table[slot] = live[i]!.id;
      count++;
      slot += skip[i]!;
      pos[i] = slot >= size ? slot - size : slot;
    }
  }
  return table;
}
