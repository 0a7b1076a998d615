/**
 * The conntrack and SNAT GC as a BPF program (bpf/bpf_gc.c), run with
 * BPF_PROG_TEST_RUN on libuv's pool, GC_BATCH keys per run: the judging
 * happens in the kernel, off the agent's event loop, and no run holds the
 * kernel's RCU read side for long (a synchronize_rcu of an ADD would wait
 * for it), so a pass over a million entries does not hold up an ADD or a
 * policy change. The object is loaded on the pins
 * the datapath made (same sizes, read from the pins), once, on first use.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { installPath } from '../../installLayout.js';
import { BpfObject, RawMap } from '../kernel/bpf/index.js';
import { DatapathError } from '../types.js';
import { GC_BATCH, GC_SAMPLE_MAX, GcFlag, GcMap, MapName } from './constants.js';
import { GC_KEY6_SIZE, GC_KEY_SIZE, gcRun, type GcRunValue } from './layout.js';

export const GC_OBJECT_FILE = 'bpf_gc.o';
const GC_PROGRAM = 'tendril_ct_gc';
const DEFAULT_OBJECT_DIR = installPath('build', 'bpf');
/** A minimal Ethernet frame: the program reads nothing of it, test runs want one. */
const DUMMY_FRAME = Buffer.alloc(64);

export type GcMapValue = (typeof GcMap)[keyof typeof GcMap];

export const GC_MAP_NAME: Record<GcMapValue, string> = {
  [GcMap.CT_TCP]: MapName.CT_TCP,
  [GcMap.CT_ANY]: MapName.CT_ANY,
  [GcMap.SNAT]: MapName.SNAT,
  [GcMap.CT6_TCP]: MapName.CT6_TCP,
  [GcMap.CT6_ANY]: MapName.CT6_ANY,
  [GcMap.SNAT6]: MapName.SNAT6,
};

/** The maps whose keys a run takes in gc_run.keys6 (40-byte IPv6 conntrack and SNAT keys); the others' go in gc_run.keys. */
const IPV6_MAPS: ReadonlySet<GcMapValue> = new Set([GcMap.CT6_TCP, GcMap.CT6_ANY, GcMap.SNAT6]);
const keySizeOf = (map: GcMapValue): number => (IPV6_MAPS.has(map) ? GC_KEY6_SIZE : GC_KEY_SIZE);

export interface GcRunInput {
  map: GcMapValue;
  /** CLOCK_MONOTONIC "now" (default: the kernel's). */
  nowNs?: bigint;
  /** SNAT mappings younger than this are left alone. */
  graceNs?: bigint;
  countOnly?: boolean;
}

export class GcProgram {
  readonly #object: BpfObject;
  readonly #globals: RawMap;
  readonly #sizes: Readonly<Record<string, number>>;

  private constructor(object: BpfObject, sizes: Readonly<Record<string, number>>) {
    this.#object = object;
    this.#sizes = sizes;
    const bss = [...object.maps.entries()].find(([name, m]) => m.internal && name.endsWith('.bss'));
    if (!bss) throw new DatapathError('failed', `${GC_OBJECT_FILE} has no .bss map for its run`);
    this.#globals = bss[1].map;
  }

  /** Loads the GC object on the maps pinned in `pinDir`, at their pinned sizes. */
  static async load(pinDir: string, objectDir = DEFAULT_OBJECT_DIR): Promise<GcProgram> {
    const path = join(objectDir, GC_OBJECT_FILE);
    if (!existsSync(path)) throw new DatapathError('failed', `eBPF object ${path} is missing: build it with make build`);
    // Loaded on its own, the object would pin maps of its own: it runs only on the datapath's.
    if (!existsSync(join(pinDir, MapName.CT_TCP))) throw new DatapathError('failed', `no conntrack map is pinned in ${pinDir}: the eBPF datapath is not loaded`);
    const maxEntries: Record<string, number> = {};
    for (const name of Object.values(MapName)) {
      const pin = join(pinDir, name);
      if (!existsSync(pin)) continue;
      const m = RawMap.openPinned(pin);
      try {
        maxEntries[name] = m.info.maxEntries;
      } finally {
        m.close();
      }
    }
    return new GcProgram(await BpfObject.load(path, { pinRoot: pinDir, maxEntries }), maxEntries);
  }

  /** A walked map's size, as pinned. */
  maxEntries(name: string): number {
    return this.#sizes[name] ?? this.#object.rawMap(name).info.maxEntries;
  }

  /**
   * One walk of one map: its keys, GC_BATCH at a time from the map's own
   * key walk, each batch judged by one run; what the runs did together.
   */
  async run(input: GcRunInput): Promise<GcRunValue> {
    const map = this.#object.rawMap(GC_MAP_NAME[input.map]);
    if (map.info.keySize !== keySizeOf(input.map)) throw new DatapathError('failed', `${map.info.name} has ${map.info.keySize}-byte keys; the GC program takes ${keySizeOf(input.map)}`);
    const total = { ...gcRun.read(Buffer.alloc(gcRun.size), 0), map: input.map };
    const sample: GcRunValue['sample'] = [];
    if (input.countOnly) return this.#runBatch(input, Buffer.alloc(0), 0);
    let last: GcRunValue | undefined;
    for await (const chunk of map.keyChunks(GC_BATCH)) {
      const r = await this.#runBatch(input, chunk.keys, chunk.count);
      for (const f of ['scanned', 'removed', 'mappings', 'orphans', 'givenBack'] as const) total[f] += r[f];
      sample.push(...r.sample.slice(0, r.samples));
      last = r;
    }
    // The count of the last run (an empty table: a count-only run says it).
    const entries = last ? last.entries : (await this.#runBatch({ ...input, countOnly: true }, Buffer.alloc(0), 0)).entries;
    const kept = sample.slice(0, GC_SAMPLE_MAX);
    return { ...total, entries, samples: kept.length, sample: kept };
  }

  async #runBatch(input: GcRunInput, keys: Buffer, count: number): Promise<GcRunValue> {
    const key = Buffer.alloc(4);
    const value = Buffer.alloc(this.#globals.info.valueSize);
    const zero = gcRun.read(Buffer.alloc(gcRun.size), 0);
    const v6 = IPV6_MAPS.has(input.map);
    const batch = Buffer.alloc(GC_BATCH * keySizeOf(input.map));
    keys.copy(batch, 0, 0, Math.min(keys.length, batch.length));
    const batches = v6 ? { keys: zero.keys, keys6: batch } : { keys: batch, keys6: zero.keys6 };
    gcRun.write(
      { ...zero, nowNs: input.nowNs ?? 0n, graceNs: input.graceNs ?? 0n, map: input.map, flags: input.countOnly ? GcFlag.COUNT_ONLY : 0, nkeys: count, ...batches },
      value,
      0,
    );
    this.#globals.update(key, value);
    const r = await this.#object.program(GC_PROGRAM).testRun({ data: DUMMY_FRAME });
    if (r.retval !== 0) throw new DatapathError('failed', `${GC_PROGRAM} refused the run (map ${input.map}): ${r.retval}`);
    return gcRun.read(this.#globals.lookup(key)!, 0);
  }

  close(): void {
    this.#object.close();
  }
}

/**
 * Runs `fn` with the GC program loaded on the pins in `pinDir`, closed after:
 * a load per pass (a small program, verified in milliseconds on libuv's
 * pool) holds no map or program between passes.
 */
export async function withGcProgram<T>(inspector: { pinDir: string }, fn: (gc: GcProgram) => Promise<T>): Promise<T> {
  const gc = await GcProgram.load(inspector.pinDir);
  try {
    return await fn(gc);
  } finally {
    gc.close();
  }
}
