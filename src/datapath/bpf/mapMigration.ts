/**
 * Adopting an older (or newer) build's pinned maps whose layout differs from
 * the objects about to load, without dropping what they hold: every pod's
 * conntrack, NAT, service and policy state.
 *
 * The steps (loadDatapathObjects drives them):
 *   1. plan: each pinned map the new objects declare is compared with its pin
 *      (type, key and value size, flags, max entries, and the key and value
 *      layouts from the pinned map's own BTF against the object's);
 *   2. stage: a staging pin directory `<pin dir>/upgrade` gets a second pin
 *      of every map that stays as it is; the changed ones are left to
 *      libbpf, which creates them there with the new objects' definitions
 *      (and BTF, so the next build can read this one's layout in turn);
 *   3. the objects load on the staging directory, then `copy` converts every
 *      entry of each old map into its new map while the old programs keep
 *      running on the old maps;
 *   4. `catchUp` copies what the old programs added during the copy (keys
 *      the new map lacks), the caller swaps the programs on every hook
 *      (programSwap.ts), and `catchUp` runs again for what came until the
 *      swap: the window where a flow's first packets went through the old
 *      programs and its next ones through the new is the swap and this
 *      pass (an entry the new programs already made for the same key is the
 *      newer one and stays, but for conntrack, where the entry from the
 *      flow's first packet wins and a partial other-direction entry goes,
 *      see MapMigrationPlan.reverseKey);
 *   5. `finish` moves every staging pin onto the real pin names (a rename:
 *      the pin path never names no map) and removes the staging directory.
 * What the old programs changed in an entry that was already copied (a
 * conntrack entry's counters, its last-seen time) between steps 3 and 4 is
 * not carried: the new entry has the values of the copy.
 */
import { existsSync, mkdirSync, readdirSync, renameSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../../logging/logger.js';
import { MAP_OF_MAPS_TYPES, MapType, PER_CPU_MAP_TYPES, possibleCpus, RawMap, unpin } from '../kernel/bpf/index.js';
import { isKernelError } from '../kernel/errors.js';
import { DatapathError } from '../types.js';
import { Btf } from './btf.js';
import { type DeclaredMap, declaredMaps, type Layout, layoutOf, layoutText } from './btfLayout.js';
import { MapName } from './constants.js';
import { compileConversion, type Conversion } from './mapConversion.js';

/** libbpf's LIBBPF_PIN_BY_NAME. */
const PIN_BY_NAME = 1;
/** The staging directory's name in the pin directory (bpffs names take no dot). */
export const STAGING_DIR = 'upgrade';
/** Entries per batch write while copying. */
const COPY_BATCH = 4096;

export interface MapMigrationPlan {
  name: string;
  /** What differs between the pin and the object, as phrases. */
  reasons: string[];
  key: Conversion;
  value: Conversion;
  /** Ring buffers and the like: the new map starts empty. */
  carriesEntries: boolean;
  oldType: number;
  newType: number;
  /**
   * Conntrack maps: the key of a flow's other direction (a new-layout key).
   * A flow whose first packets the old programs saw after the last pass
   * before the swap, and whose next ones the new programs saw before the
   * pass after it, has a partial entry in the new map: a reply looked like
   * a new flow the other way (no reverse NAT), a later packet like a new
   * flow without the first packet's translation. The pass after the swap
   * writes the old entry over the new one (the entry made from the first
   * packet is the one that knows the flow) and removes the other-direction
   * entry the old map did not have.
   */
  reverseKey?: (key: Uint8Array) => Uint8Array;
  /** The old-layout key of a new-layout one (conntrack maps: to tell whether the old build had a reversed flow). */
  oldKeyOf?: (key: Uint8Array) => Uint8Array | undefined;
}

export interface MigratedMap {
  map: string;
  copied: number;
  /** Entries the old programs added after the first copy, carried over after the swap. */
  caughtUp: number;
  /** Entries that could not be carried: a value that does not fit its new field, or no room (a smaller size). */
  dropped: number;
  /** Conntrack entries the new programs made for a caught-up flow's replies before it was carried over, removed. */
  reconciled: number;
}

/** A pinned map the new objects cannot adopt, with the reason. */
export class MapMigrationError extends DatapathError {
  constructor(message: string, opts?: { cause?: unknown }) {
    super('failed', message, [], '', opts);
  }
}

/** The maps the objects declare for pinning by name, once per name (every object shares them). */
export function declaredPinnedMaps(objectPaths: readonly string[]): DeclaredMap[] {
  const byName = new Map<string, DeclaredMap>();
  for (const path of objectPaths) for (const m of declaredMaps(Btf.ofFile(path))) if (m.pinning === PIN_BY_NAME && !byName.has(m.name)) byName.set(m.name, m);
  return [...byName.values()];
}

/** Map types whose entries may go without losing live state: an LRU evicts by design, an array's slots always exist. */
const DROPPABLE_MAP_TYPES: ReadonlySet<number> = new Set([MapType.ARRAY, MapType.PERCPU_ARRAY, MapType.LRU_HASH, MapType.LRU_PERCPU_HASH]);

/** Whether `map` holds more than `limit` entries (walks at most limit + 1 keys). */
function entriesBeyond(map: RawMap, limit: number): boolean {
  let key: Buffer | undefined;
  for (let n = 0; n <= limit; n++) {
    key = map.nextKey(key);
    if (!key) return false;
  }
  return true;
}

/** The key and value layouts of a pinned map, from its own BTF (undefined when it has none). */
export function pinnedLayouts(map: RawMap, cache = new Map<number, Btf>()): { key: Layout; value: Layout } | undefined {
  const { btfId, btfKeyTypeId, btfValueTypeId } = map.info;
  if (btfId === 0 || btfKeyTypeId === 0 || btfValueTypeId === 0) return undefined;
  // The maps one object made share its BTF: read once per start.
  let btf = cache.get(btfId);
  if (!btf) cache.set(btfId, (btf = Btf.ofId(btfId)));
  return { key: layoutOf(btf, btfKeyTypeId), value: layoutOf(btf, btfValueTypeId) };
}

/**
 * Which pinned maps in `pinDir` the objects would refuse or misread, and how
 * each converts. `maxEntries` is what the objects will ask for by name.
 */
export function planMapMigration(pinDir: string, declared: readonly DeclaredMap[], maxEntries: Readonly<Record<string, number>>): MapMigrationPlan[] {
  const plans: MapMigrationPlan[] = [];
  const btfs = new Map<number, Btf>();
  for (const want of declared) {
    const path = join(pinDir, want.name);
    if (!existsSync(path)) continue;
    const old = RawMap.openPinned(path);
    try {
      const plan = planOne(old, want, maxEntries[want.name] ?? want.maxEntries, btfs);
      if (plan) plans.push(plan);
    } finally {
      old.close();
    }
  }
  return plans;
}

function planOne(old: RawMap, want: DeclaredMap, maxEntries: number, btfs: Map<number, Btf>): MapMigrationPlan | undefined {
  const info = old.info;
  const reasons: string[] = [];
  if (info.type !== want.type) reasons.push(`type ${info.type} → ${want.type}`);
  if (info.keySize !== want.keySize) reasons.push(`key size ${info.keySize} → ${want.keySize}`);
  if (info.valueSize !== want.valueSize) reasons.push(`value size ${info.valueSize} → ${want.valueSize}`);
  if (info.flags !== want.flags) reasons.push(`flags 0x${info.flags.toString(16)} → 0x${want.flags.toString(16)}`);
  if (info.maxEntries !== maxEntries) reasons.push(`max entries ${info.maxEntries} → ${maxEntries}`);
  const oldLayouts = want.key && want.value ? pinnedLayouts(old, btfs) : undefined;
  if (oldLayouts && want.key && want.value) {
    if (layoutText(oldLayouts.key) !== layoutText(want.key)) reasons.push('key layout');
    if (layoutText(oldLayouts.value) !== layoutText(want.value)) reasons.push('value layout');
  }
  if (reasons.length === 0) return undefined;
  const what = `pinned map ${want.name} (${reasons.join(', ')})`;
  const noEntries = info.type === MapType.RINGBUF && want.type === MapType.RINGBUF;
  if (!noEntries) {
    if (MAP_OF_MAPS_TYPES.has(info.type) || MAP_OF_MAPS_TYPES.has(want.type) || info.type === MapType.PROG_ARRAY || want.type === MapType.PROG_ARRAY || want.type === MapType.RINGBUF || info.type === MapType.RINGBUF) {
      throw new MapMigrationError(`${what}: a map of this type cannot be carried over to the new definition (remove the pin to start it empty)`);
    }
    if (PER_CPU_MAP_TYPES.has(info.type) !== PER_CPU_MAP_TYPES.has(want.type)) throw new MapMigrationError(`${what}: a per-CPU map and a shared one cannot be converted into each other`);
    // A smaller table that cannot take what the old one holds would drop live flows, NAT mappings or policy:
    // refused. An LRU drops entries by design, and an array's slots are all there whatever they hold.
    if (maxEntries < info.maxEntries && !DROPPABLE_MAP_TYPES.has(info.type) && entriesBeyond(old, maxEntries)) {
      throw new MapMigrationError(`${what}: it holds more than the ${maxEntries} entries of the new size, and carrying it over would drop live state (keep the old --bpf-*-max, or remove the pin to start it empty)`);
    }
  }
  let key: Conversion;
  let value: Conversion;
  if (noEntries || (info.keySize === want.keySize && info.valueSize === want.valueSize && !oldLayouts)) {
    // Same sizes and no BTF to say otherwise (a map made by an earlier release's retyping): bytes as they are.
    const bytes = (size: number): Layout => ({ kind: 'opaque', size, name: 'bytes' });
    key = compileConversion(bytes(info.keySize), bytes(want.keySize));
    value = compileConversion(bytes(info.valueSize), bytes(want.valueSize));
  } else if (oldLayouts && want.key && want.value) {
    key = compileConversion(oldLayouts.key, want.key);
    value = compileConversion(oldLayouts.value, want.value);
  } else {
    throw new MapMigrationError(`${what}: the pinned map or the object has no BTF for its key and value, so its fields cannot be matched (remove the pin to start it empty)`);
  }
  const reverseKey = CONNTRACK_MAPS.has(want.name) && want.key ? flowReverser(want.key) : undefined;
  const back = reverseKey && oldLayouts && want.key ? compileConversion(want.key, oldLayouts.key) : reverseKey && !oldLayouts ? key : undefined;
  const oldKeyOf = back
    ? (k: Uint8Array) => {
        const out = new Uint8Array(info.keySize);
        return back.convert(k, 0, out, 0) ? out : undefined;
      }
    : undefined;
  return { name: want.name, reasons, key, value, carriesEntries: !noEntries, oldType: info.type, newType: want.type, ...(reverseKey ? { reverseKey } : {}), ...(oldKeyOf ? { oldKeyOf } : {}) };
}

/** Maps keyed by a flow's tuple as its first packet had it (struct ct4_key, struct ct6_key). */
const CONNTRACK_MAPS: ReadonlySet<string> = new Set([MapName.CT_TCP, MapName.CT_ANY, MapName.CT6_TCP, MapName.CT6_ANY]);

/** Swaps saddr/daddr and sport/dport of a key of this layout (undefined when it has no such fields). */
function flowReverser(key: Layout): ((k: Uint8Array) => Uint8Array) | undefined {
  if (key.kind !== 'struct') return undefined;
  const f = (name: string) => key.fields.find((x) => x.name === name);
  const pairs = [
    [f('saddr'), f('daddr')],
    [f('sport'), f('dport')],
  ] as const;
  const swaps: Array<{ a: number; b: number; len: number }> = [];
  for (const [a, b] of pairs) {
    if (!a || !b || a.layout.size !== b.layout.size) return undefined;
    swaps.push({ a: a.offset, b: b.offset, len: a.layout.size });
  }
  return (k) => {
    const r = Uint8Array.from(k);
    for (const { a, b, len } of swaps) {
      r.set(k.subarray(a, a + len), b);
      r.set(k.subarray(b, b + len), a);
    }
    return r;
  };
}

/** Bytes of one per-CPU slot in a lookup buffer. */
const slotSize = (valueSize: number) => Math.ceil(valueSize / 8) * 8;

/** A migration under way: the staging directory and the old maps it reads. */
export class MapMigration {
  readonly stagingDir: string;
  readonly #old = new Map<string, RawMap>();
  readonly #results = new Map<string, MigratedMap>();
  /** Keys (hex, old layout) of each old map already carried or looked at: a later pass converts only the others. */
  readonly #seen = new Map<string, Set<string>>();
  /** IDs of every map of the pin directory the objects declare: a program using one is the old build's. */
  readonly oldMapIds = new Set<number>();
  #new = new Map<string, RawMap>();

  private constructor(
    readonly pinDir: string,
    readonly plans: readonly MapMigrationPlan[],
    private readonly log: Logger,
  ) {
    this.stagingDir = join(pinDir, STAGING_DIR);
  }

  /**
   * Makes the staging directory (a leftover of a run that died half way is
   * cleared first: the real pins were not touched yet then) with a second
   * pin of every pinned map the objects declare and the plans leave as it is.
   */
  static stage(pinDir: string, plans: readonly MapMigrationPlan[], declared: readonly DeclaredMap[], log: Logger): MapMigration {
    const m = new MapMigration(pinDir, plans, log);
    removeStaging(m.stagingDir);
    mkdirStaging(m.stagingDir);
    const changed = new Set(plans.map((p) => p.name));
    try {
      for (const d of declared) {
        const path = join(pinDir, d.name);
        if (changed.has(d.name) || !existsSync(path)) continue;
        const map = RawMap.openPinned(path);
        try {
          m.oldMapIds.add(map.info.id);
          map.pin(join(m.stagingDir, d.name));
        } finally {
          map.close();
        }
      }
      for (const p of plans) {
        const old = RawMap.openPinned(join(pinDir, p.name));
        m.#old.set(p.name, old);
        m.oldMapIds.add(old.info.id);
      }
    } catch (err) {
      m.abort();
      throw err;
    }
    for (const p of plans) log.info({ map: p.name, differs: p.reasons, key: p.key.changes, value: p.value.changes }, 'pinned map has another layout: converting it to the new one beside the old');
    return m;
  }

  /** Step 3: the new maps the loaded objects made in the staging directory, filled from the old ones. */
  async copy(newMaps: ReadonlyMap<string, RawMap>): Promise<void> {
    this.#new = new Map(newMaps);
    for (const p of this.plans) {
      const result: MigratedMap = { map: p.name, copied: 0, caughtUp: 0, dropped: 0, reconciled: 0 };
      this.#results.set(p.name, result);
      if (!p.carriesEntries) continue;
      const { old, next } = this.#pair(p.name);
      const conv = new EntryConverter(p, old, next);
      const seen = new Set<string>();
      this.#seen.set(p.name, seen);
      let batch: Array<[Uint8Array, Uint8Array]> = [];
      const flush = async () => {
        const r = await writeAll(next, batch, 'any');
        result.copied += r.written;
        result.dropped += r.full;
        batch = [];
      };
      for await (const [k, v] of old.entries()) {
        seen.add(k.toString('hex'));
        const e = conv.convert(k, v);
        if (!e) {
          result.dropped++;
          continue;
        }
        batch.push(e);
        if (batch.length >= COPY_BATCH) await flush();
      }
      if (batch.length > 0) await flush();
    }
  }

  /**
   * Carries over what the old programs added since the last pass: keys the
   * new map lacks (an entry the new programs made for the key meanwhile is
   * the newer one and stays). Run once before the swap (what came during
   * the copy) and once right after it (`afterSwap`: what came until the
   * swap; conntrack's entries written over the new programs' and their
   * other-direction entries reconciled, see MapMigrationPlan.reverseKey).
   */
  async catchUp(afterSwap: boolean): Promise<MigratedMap[]> {
    for (const p of this.plans) {
      if (!p.carriesEntries) continue;
      const { old, next } = this.#pair(p.name);
      const result = this.#results.get(p.name)!;
      const seen = this.#seen.get(p.name)!;
      const conv = new EntryConverter(p, old, next);
      // Conntrack after the swap: the old entry of a flow it saw first wins (see reverseKey).
      const flowsFirstSeen = afterSwap && p.reverseKey !== undefined;
      const missing: Array<[Uint8Array, Uint8Array]> = [];
      for await (const [k, v] of old.entries()) {
        // Only keys no pass has seen: the window after the swap is this loop, so it does as little as it can.
        const hex = k.toString('hex');
        if (seen.has(hex)) continue;
        seen.add(hex);
        const e = conv.convert(k, v);
        if (e && (flowsFirstSeen || next.lookup(e[0]) === undefined)) missing.push(e);
      }
      // noexist: an entry the new programs made for the key meanwhile is the newer one (but for conntrack's, above).
      const r = await writeAll(next, missing, flowsFirstSeen ? 'any' : 'noexist');
      result.caughtUp += r.written;
      result.dropped += r.full;
      if (flowsFirstSeen) {
        for (const [k] of missing) {
          const rev = p.reverseKey!(k);
          // Only an entry the old build did not have: the new programs made it since the swap.
          if (!this.#oldHas(p, seen, rev) && next.delete(rev)) result.reconciled++;
        }
      }
    }
    return [...this.#results.values()];
  }

  /** Whether the old map had the flow of this new-layout key (its old-layout key is among those seen). */
  #oldHas(p: MapMigrationPlan, seen: ReadonlySet<string>, newKey: Uint8Array): boolean {
    const oldKey = p.oldKeyOf?.(newKey);
    // Without a way back to the old key, assume it had it: an entry is kept rather than removed on a guess.
    return oldKey === undefined || seen.has(Buffer.from(oldKey).toString('hex'));
  }

  /** Step 5: the staging pins take the real names; the old maps go with their last pin and fd. */
  finish(): MigratedMap[] {
    for (const name of readdirSync(this.stagingDir)) renameSync(join(this.stagingDir, name), join(this.pinDir, name));
    rmdirSync(this.stagingDir);
    this.#closeOld();
    const results = [...this.#results.values()];
    for (const r of results) {
      if (r.dropped > 0) this.log.warn({ ...r }, 'pinned map carried over to the new layout, but some entries could not be (a value its new field cannot hold, or no room)');
      else this.log.info({ ...r }, 'pinned map carried over to the new layout');
    }
    return results;
  }

  /** Before the swap: the staging pins go, the real pins and the old programs stay as they were. */
  abort(): void {
    this.#closeOld();
    removeStaging(this.stagingDir);
  }

  #closeOld(): void {
    for (const m of this.#old.values()) m.close();
    this.#old.clear();
  }

  #pair(name: string): { old: RawMap; next: RawMap } {
    const old = this.#old.get(name);
    const next = this.#new.get(name);
    if (!old || !next) throw new MapMigrationError(`map ${name} is missing on one side of its migration`);
    return { old, next };
  }
}

/** Converts one entry (per-CPU values slot by slot) from the old map's layout to the new one's. */
class EntryConverter {
  readonly #oldSlot: number;
  readonly #newSlot: number;
  readonly #slots: number;

  constructor(
    private readonly plan: MapMigrationPlan,
    old: RawMap,
    private readonly next: RawMap,
  ) {
    const perCpu = PER_CPU_MAP_TYPES.has(old.info.type);
    this.#slots = perCpu ? possibleCpus() : 1;
    this.#oldSlot = perCpu ? slotSize(old.info.valueSize) : old.info.valueSize;
    this.#newSlot = perCpu ? slotSize(next.info.valueSize) : next.info.valueSize;
  }

  convert(k: Uint8Array, v: Uint8Array): [Uint8Array, Uint8Array] | undefined {
    const key = new Uint8Array(this.next.info.keySize);
    if (!this.plan.key.convert(k, 0, key, 0)) return undefined;
    const value = new Uint8Array(this.next.info.valueBufferSize);
    for (let s = 0; s < this.#slots; s++) if (!this.plan.value.convert(v, s * this.#oldSlot, value, s * this.#newSlot)) return undefined;
    return [key, value];
  }
}

/** Writes entries in batches; a full map (a smaller size) takes them one by one, counting the ones without room. */
async function writeAll(map: RawMap, entries: ReadonlyArray<[Uint8Array, Uint8Array]>, mode: 'any' | 'noexist'): Promise<{ written: number; full: number }> {
  if (entries.length === 0) return { written: 0, full: 0 };
  try {
    return { written: (await map.updateBatch(entries, mode)).count, full: 0 };
  } catch (err) {
    if (!isKernelError(err, 'E2BIG', 'ENOMEM', 'EEXIST')) throw err;
  }
  let written = 0;
  let full = 0;
  for (const [k, v] of entries) {
    try {
      map.update(k, v, mode);
      written++;
    } catch (err) {
      if (isKernelError(err, 'EEXIST')) continue;
      if (!isKernelError(err, 'E2BIG', 'ENOMEM')) throw err;
      full++;
    }
  }
  return { written, full };
}

function mkdirStaging(path: string): void {
  try {
    mkdirSync(path, { mode: 0o700 });
  } catch (err) {
    throw new MapMigrationError(`making the staging pin directory ${path} failed: ${(err as Error).message}`, { cause: err });
  }
}

/** Removes a staging directory's pins and the directory (absent is fine). */
function removeStaging(dir: string): void {
  if (!existsSync(dir)) return;
  for (const name of readdirSync(dir)) unpin(join(dir, name));
  rmdirSync(dir);
}
