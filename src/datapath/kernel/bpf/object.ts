import { basename } from 'node:path';
import { mkdirPinDir } from './bpffs.js';
import { type Codec } from './codec.js';
import { BpfMap, RawMap } from './map.js';
import { MapOfMaps } from './mapOfMaps.js';
import { bpfAsync, nativeBpf } from './native.js';
import { BpfProgram } from './program.js';

export interface LoadOptions {
  /**
   * Directory for maps declared with `pinning = LIBBPF_PIN_BY_NAME`: each is
   * pinned at `<pinRoot>/<map name>`, or reused when a pin is already there
   * (the kernel map keeps its entries across agent restarts). libbpf refuses
   * a pinned map whose type, sizes, max entries or flags differ from the
   * object's. Created (0700) when missing; must be on a bpf filesystem.
   * Without it nothing is pinned (libbpf's default root is not used), so a
   * test or tool loading an object leaves no pins behind.
   */
  pinRoot?: string;
  /** max_entries per map name, applied before load (maps sized by agent flags). */
  maxEntries?: Readonly<Record<string, number>>;
}

export interface LoadedMap {
  map: RawMap;
  /** Where libbpf pinned (or found) it; undefined for maps that are not pinned. */
  pinPath: string | undefined;
  /** The map was already pinned and was reused, entries and all. */
  reusedPin: boolean;
  /** A map libbpf made for the object's global data (.data, .bss, .rodata). */
  internal: boolean;
}

/**
 * A loaded ELF object: its programs and maps by name. libbpf's bpf_object is
 * already closed; each program and map here holds its own fd, all closed by
 * close().
 */
export class BpfObject {
  readonly programs: ReadonlyMap<string, BpfProgram>;
  readonly maps: ReadonlyMap<string, LoadedMap>;
  /** libbpf's warnings during a successful load, if any. */
  readonly log: string | undefined;

  private constructor(
    readonly path: string,
    programs: Map<string, BpfProgram>,
    maps: Map<string, LoadedMap>,
    log: string | undefined,
  ) {
    this.programs = programs;
    this.maps = maps;
    this.log = log;
  }

  /**
   * Opens an object built by `clang -O2 -g -target bpf`, applies the options
   * and loads it (verification runs on libuv's pool). Failures are
   * KernelErrors for "bpf_object__load <file>" (or open_file, or
   * set_max_entries) carrying libbpf's log, the verifier's included.
   */
  static async load(path: string, opts: LoadOptions = {}): Promise<BpfObject> {
    if (opts.pinRoot !== undefined) await mkdirPinDir(opts.pinRoot);
    const maxEntries = Object.entries(opts.maxEntries ?? {});
    for (const [name, n] of maxEntries) {
      if (!Number.isInteger(n) || n < 1 || n > 0xffffffff) throw new RangeError(`maxEntries for map ${name} must be a positive 32-bit integer, got ${n}`);
    }
    const r = await bpfAsync(() =>
      nativeBpf().objectLoad(path, {
        ...(opts.pinRoot !== undefined ? { pinRoot: opts.pinRoot } : {}),
        maxEntries,
      }),
    );
    const programs = new Map<string, BpfProgram>();
    const maps = new Map<string, LoadedMap>();
    for (const p of r.programs) programs.set(p.name, new BpfProgram(p.handle, { name: p.name, section: p.section }));
    for (const m of r.maps) {
      maps.set(m.name, { map: new RawMap(m.handle), pinPath: m.pinPath ?? undefined, reusedPin: m.reusedPin, internal: m.internal });
    }
    return new BpfObject(path, programs, maps, r.log);
  }

  get fileName(): string {
    return basename(this.path);
  }

  program(name: string): BpfProgram {
    const p = this.programs.get(name);
    if (!p) throw new Error(`${this.fileName} has no program ${name} (it has ${[...this.programs.keys()].join(', ')})`);
    return p;
  }

  rawMap(name: string): RawMap {
    const m = this.maps.get(name);
    if (!m) throw new Error(`${this.fileName} has no map ${name} (it has ${[...this.maps.keys()].join(', ')})`);
    return m.map;
  }

  /** A typed view of one of the object's maps (closed with the object). */
  map<K, V>(name: string, key: Codec<K>, value: Codec<V>): BpfMap<K, V> {
    return new BpfMap(this.rawMap(name), key, value);
  }

  /** A typed view of one of the object's maps of maps (closed with the object). */
  mapOfMaps<K>(name: string, key: Codec<K>): MapOfMaps<K> {
    return new MapOfMaps(this.rawMap(name), key);
  }

  /** Closes every program and map fd; pinned maps and attached programs live on. */
  close(): void {
    for (const p of this.programs.values()) p.close();
    for (const m of this.maps.values()) m.map.close();
  }
}
