/**
 * The conntrack and SNAT GC as a BPF program (bpf/bpf_gc.c), run with
 * BPF_PROG_TEST_RUN on libuv's pool: the walk over a table of a million
 * entries happens in the kernel, off the agent's event loop, so a GC pass
 * never delays an ADD or a policy change. The object is loaded on the pins
 * the datapath made (same sizes, read from the pins), once, on first use.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BpfObject, RawMap } from '../kernel/bpf/index.js';
import { DatapathError } from '../types.js';
import { GcFlag, GcMap, MapName } from './constants.js';
import { gcRun, type GcRunValue } from './layout.js';

export const GC_OBJECT_FILE = 'bpf_gc.o';
const GC_PROGRAM = 'tendril_ct_gc';
const DEFAULT_OBJECT_DIR = fileURLToPath(new URL('../../../../build/bpf/', import.meta.url));
/** A minimal Ethernet frame: the program reads nothing of it, test runs want one. */
const DUMMY_FRAME = Buffer.alloc(64);

export type GcMapValue = (typeof GcMap)[keyof typeof GcMap];

export const GC_MAP_NAME: Record<GcMapValue, string> = {
  [GcMap.CT_TCP]: MapName.CT_TCP,
  [GcMap.CT_ANY]: MapName.CT_ANY,
  [GcMap.SNAT]: MapName.SNAT,
};

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

  /** One run over one map; what it did. */
  async run(input: GcRunInput): Promise<GcRunValue> {
    const key = Buffer.alloc(4);
    const value = Buffer.alloc(this.#globals.info.valueSize);
    const zero = gcRun.read(Buffer.alloc(gcRun.size), 0);
    gcRun.write(
      { ...zero, nowNs: input.nowNs ?? 0n, graceNs: input.graceNs ?? 0n, map: input.map, flags: input.countOnly ? GcFlag.COUNT_ONLY : 0 },
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
