/**
 * Writes endpoints' policy map states into tendril_policy as diffs. A shadow
 * holds, per endpoint, what the map holds for it (loaded from the pinned map
 * at start, so an agent restart diffs against the kernel's truth, not an
 * empty map). Each sync writes only changed keys, upserts before deletes,
 * and a failed write restores every key it already changed before it
 * throws: the map never holds half of a map state.
 */
import type { MapEntry } from '../../policy/index.js';
import { isKernelError } from '../kernel/errors.js';
import { type BpfMap, codec } from '../kernel/bpf/index.js';
import { DatapathError } from '../types.js';
import { ReservedCookie } from './constants.js';
import { policyKey, type PolicyEntryValue, type PolicyKey } from './layout.js';
import { ruleCookie } from './ruleCookie.js';

type KeyHex = string;
interface Written {
  key: PolicyKey;
  value: PolicyEntryValue;
}

export interface PolicyWriteStats {
  upserts: number;
  deletes: number;
}

/** The map key and value of one engine entry for endpoint `endpointId` (of its staged view with `staged`). */
export function policyMapEntry(endpointId: number, e: MapEntry, staged = false): Written {
  const key: PolicyKey = {
    endpointId,
    identity: e.key.identity,
    egress: e.key.direction === 'egress',
    ...(staged ? { staged: true as const } : {}),
    proto: e.key.proto,
    port: e.key.proto === 0 ? 0 : e.key.port,
    portPrefixLen: e.key.proto === 0 ? 0 : e.key.prefixLen,
  };
  let cookie: number;
  if (e.builtin === 'not-enforced') cookie = ReservedCookie.NOT_ENFORCED;
  else if (e.builtin === 'allow-localhost') cookie = ReservedCookie.ALLOW_LOCALHOST;
  else cookie = e.derivedFrom[0] !== undefined ? ruleCookie(e.derivedFrom[0]) : ReservedCookie.NONE;
  const value: PolicyEntryValue = { cookie, deny: e.verdict === 'deny' ? 1 : 0, l4PrefixBits: key.proto === 0 ? 0 : 8 + key.portPrefixLen };
  return { key, value };
}

function hexOf(key: PolicyKey): KeyHex {
  return codec.encode(policyKey, key).toString('hex');
}

function sameValue(a: PolicyEntryValue, b: PolicyEntryValue): boolean {
  return a.cookie === b.cookie && a.deny === b.deny && a.l4PrefixBits === b.l4PrefixBits;
}

export class PolicyMapWriter {
  readonly #shadow = new Map<number, Map<KeyHex, Written>>();

  private constructor(readonly map: BpfMap<PolicyKey, PolicyEntryValue>) {}

  /** A writer over the pinned map, its shadow read from what the map holds now. */
  static async open(map: BpfMap<PolicyKey, PolicyEntryValue>): Promise<PolicyMapWriter> {
    const w = new PolicyMapWriter(map);
    for await (const [key, value] of map.entries()) w.#shadowOf(key.endpointId).set(hexOf(key), { key, value });
    return w;
  }

  #shadowOf(id: number): Map<KeyHex, Written> {
    let s = this.#shadow.get(id);
    if (!s) this.#shadow.set(id, (s = new Map()));
    return s;
  }

  /** Endpoint IDs the map holds entries for. */
  endpointIds(): number[] {
    return [...this.#shadow.entries()].filter(([, s]) => s.size > 0).map(([id]) => id);
  }

  /** What the map holds for one endpoint (from the shadow). */
  entriesOf(endpointId: number): Array<{ key: PolicyKey; value: PolicyEntryValue }> {
    return [...(this.#shadow.get(endpointId)?.values() ?? [])].map((w) => ({ key: w.key, value: w.value }));
  }

  /**
   * Brings endpoint `endpointId`'s entries to `entries`, and its staged view's
   * (POLICY_KEY_STAGED keys) to `stagedEntries` (none when undefined); all or nothing.
   */
  sync(endpointId: number, entries: readonly MapEntry[], stagedEntries?: readonly MapEntry[]): PolicyWriteStats {
    const desired = new Map<KeyHex, Written>();
    for (const e of entries) {
      const w = policyMapEntry(endpointId, e);
      desired.set(hexOf(w.key), w);
    }
    for (const e of stagedEntries ?? []) {
      const w = policyMapEntry(endpointId, e, true);
      desired.set(hexOf(w.key), w);
    }
    return this.#apply(endpointId, desired);
  }

  /** Removes every entry of the endpoint; all or nothing. */
  remove(endpointId: number): PolicyWriteStats {
    const stats = this.#apply(endpointId, new Map());
    this.#shadow.delete(endpointId);
    return stats;
  }

  #apply(endpointId: number, desired: Map<KeyHex, Written>): PolicyWriteStats {
    const shadow = this.#shadowOf(endpointId);
    const upserts: Array<[KeyHex, Written]> = [];
    for (const [hex, w] of desired) {
      const had = shadow.get(hex);
      if (!had || !sameValue(had.value, w.value)) upserts.push([hex, w]);
    }
    const deletes: KeyHex[] = [];
    for (const hex of shadow.keys()) if (!desired.has(hex)) deletes.push(hex);
    /** Keys changed so far with what they held before (undefined = absent), for the rollback. */
    const done: Array<[KeyHex, Written | undefined, PolicyKey]> = [];
    try {
      for (const [hex, w] of upserts) {
        this.map.set(w.key, w.value);
        done.push([hex, shadow.get(hex), w.key]);
      }
      for (const hex of deletes) {
        const had = shadow.get(hex)!;
        this.map.delete(had.key);
        done.push([hex, had, had.key]);
      }
    } catch (err) {
      const rollback = this.#rollBack(done);
      const full = isKernelError(err, 'E2BIG', 'ENOSPC', 'ENOMEM');
      const why = full
        ? `policy map ${this.map.name} is full (${this.map.info.maxEntries} entries for all endpoints; raise --bpf-policy-max)`
        : `writing policy map ${this.map.name} failed: ${(err as Error).message}`;
      throw new DatapathError('failed', `endpoint ${endpointId}: ${why}; ${rollback === undefined ? 'the map holds what it held before' : `restoring the previous entries failed too: ${rollback}`}`, [], '', { cause: err });
    }
    for (const [hex, w] of upserts) shadow.set(hex, w);
    for (const hex of deletes) shadow.delete(hex);
    return { upserts: upserts.length, deletes: deletes.length };
  }

  /** Undoes `done` in reverse; the first failure's message, or undefined when all went back. */
  #rollBack(done: Array<[KeyHex, Written | undefined, PolicyKey]>): string | undefined {
    let failure: string | undefined;
    for (const [, before, key] of done.reverse()) {
      try {
        if (before === undefined) this.map.delete(key);
        else this.map.set(before.key, before.value);
      } catch (err) {
        failure ??= (err as Error).message;
      }
    }
    return failure;
  }
}
