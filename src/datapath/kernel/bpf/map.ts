import { KernelError, errnoNumber, isKernelError } from '../errors.js';
import { type Codec, decode, encode, perCpu } from './codec.js';
import { MAP_OF_MAPS_TYPES, MAX_OBJ_NAME, MapType, type MapTypeName, PER_CPU_MAP_TYPES, UpdateFlag, type UpdateMode } from './constants.js';
import { possibleCpus } from './cpus.js';
import { type NativeHandle, type NativeMapInfo, bpfAsync, bpfSync, nativeBpf } from './native.js';

/** What the kernel reports about a map. */
export type MapInfo = Readonly<NativeMapInfo>;

/** The properties that decide whether a pinned map can be reused as is; absent ones are not checked. */
export interface MapShape {
  type?: number | MapTypeName;
  keySize?: number;
  valueSize?: number;
  maxEntries?: number;
  flags?: number;
}

export interface MapSpec extends MapShape {
  /** The kernel's name for the map (15 bytes at most). */
  name: string;
  type: number | MapTypeName;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  /** For map-in-map types: a map of the shape the inner maps will have. */
  innerMap?: RawMap;
}

/** Entries per native call when updating or dumping many: bounds memory, not speed. */
const BATCH_CHUNK = 8192;
const DUMP_CHUNK = 512;

export function mapTypeNumber(type: number | MapTypeName): number {
  return typeof type === 'number' ? type : MapType[type];
}

function mapTypeLabel(type: number): string {
  const name = Object.entries(MapType).find(([, v]) => v === type)?.[0];
  return name ?? `type ${type}`;
}

/** The differences between a map's info and an expected shape, as phrases. */
export function shapeMismatches(info: MapInfo, expect: MapShape): string[] {
  const out: string[] = [];
  if (expect.type !== undefined) {
    const type = mapTypeNumber(expect.type);
    if (info.type !== type) out.push(`type ${mapTypeLabel(info.type)}, expected ${mapTypeLabel(type)}`);
  }
  if (expect.keySize !== undefined && info.keySize !== expect.keySize) out.push(`key size ${info.keySize}, expected ${expect.keySize}`);
  if (expect.valueSize !== undefined && info.valueSize !== expect.valueSize) out.push(`value size ${info.valueSize}, expected ${expect.valueSize}`);
  if (expect.maxEntries !== undefined && info.maxEntries !== expect.maxEntries) {
    out.push(`max entries ${info.maxEntries}, expected ${expect.maxEntries}`);
  }
  if (expect.flags !== undefined && info.flags !== expect.flags) out.push(`flags 0x${info.flags.toString(16)}, expected 0x${expect.flags.toString(16)}`);
  return out;
}

/**
 * A BPF map by raw bytes. Keys and values must be exactly the map's key size
 * and value buffer size (checked again natively). Creation returns a promise
 * (a preallocated map fills every element first: 20 to 250 ms for a million
 * entries here). Element operations on ordinary maps are synchronous single
 * bpf() calls; bulk ones return promises. Maps of maps take writes and
 * deletes only through setInnerMap/deleteInnerMap, which run off the event
 * loop because the kernel waits for an RCU grace period after each.
 */
export class RawMap {
  readonly info: MapInfo;
  readonly #handle: NativeHandle;

  /** Takes ownership of a native map handle. */
  constructor(handle: NativeHandle) {
    this.#handle = handle;
    this.info = Object.freeze(bpfSync(() => nativeBpf().mapInfo(handle)));
  }

  /** BPF_MAP_CREATE on libuv's pool: a map owned by this process until pinned or closed. */
  static async create(spec: MapSpec): Promise<RawMap> {
    if (Buffer.byteLength(spec.name) > MAX_OBJ_NAME) throw new RangeError(`map name ${spec.name} is longer than ${MAX_OBJ_NAME} bytes`);
    const bpf = nativeBpf();
    const handle = await bpfAsync(() =>
      bpf.mapCreate({
        type: mapTypeNumber(spec.type),
        name: spec.name,
        keySize: spec.keySize,
        valueSize: spec.valueSize,
        maxEntries: spec.maxEntries,
        flags: spec.flags ?? 0,
        ...(spec.innerMap ? { innerMap: spec.innerMap.handle() } : {}),
      }),
    );
    return new RawMap(handle);
  }

  /**
   * Opens a pinned map (BPF_OBJ_GET). With `expect`, a map of another shape
   * is refused (closed again) with an EINVAL KernelError that says what differs.
   */
  static openPinned(path: string, expect?: MapShape): RawMap {
    const map = new RawMap(bpfSync(() => nativeBpf().objGet(path, 'map')));
    if (expect) {
      const diff = shapeMismatches(map.info, expect);
      if (diff.length > 0) {
        map.close();
        throw new KernelError(errnoNumber('EINVAL'), `BPF_OBJ_GET ${path}`, `pinned map ${map.info.name} is incompatible: ${diff.join('; ')}`);
      }
    }
    return map;
  }

  /**
   * Reuses the map pinned at `path` when it has the spec's shape, or creates
   * and pins one. Another process pinning first is handled by reopening. A
   * pinned map of another shape is an error, never silently replaced: its
   * entries are the datapath's state. Opening is synchronous; creating runs
   * on libuv's pool.
   */
  static async openOrCreatePinned(path: string, spec: MapSpec): Promise<{ map: RawMap; created: boolean }> {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        return { map: RawMap.openPinned(path, spec), created: false };
      } catch (err) {
        if (!isKernelError(err, 'ENOENT')) throw err;
      }
      const map = await RawMap.create(spec);
      try {
        map.pin(path);
        return { map, created: true };
      } catch (err) {
        map.close();
        if (!isKernelError(err, 'EEXIST')) throw err;
      }
    }
    throw new KernelError(errnoNumber('EEXIST'), `BPF_OBJ_PIN ${path}`, 'the pin kept appearing and disappearing');
  }

  /** The native handle, for the other parts of this module. */
  handle(): NativeHandle {
    return this.#handle;
  }

  get name(): string {
    return this.info.name;
  }

  /** The map's fd in this process (valid until close). */
  get fd(): number {
    return bpfSync(() => nativeBpf().fd(this.#handle));
  }

  /** The value, or undefined when the key is absent. */
  lookup(key: Uint8Array): Buffer | undefined {
    return bpfSync(() => nativeBpf().mapLookup(this.#handle, key, 0));
  }

  /** Writes one entry; a map of maps refuses (TypeError): see setInnerMap. */
  update(key: Uint8Array, value: Uint8Array, mode: UpdateMode = 'any'): void {
    bpfSync(() => nativeBpf().mapUpdate(this.#handle, key, value, UpdateFlag[mode]));
  }

  /** Deletes a key; false when it was absent. A map of maps refuses (TypeError): see deleteInnerMap. */
  delete(key: Uint8Array): boolean {
    return bpfSync(() => nativeBpf().mapDelete(this.#handle, key));
  }

  /** Whether this is an ARRAY_OF_MAPS or HASH_OF_MAPS. */
  get isMapOfMaps(): boolean {
    return MAP_OF_MAPS_TYPES.has(this.info.type);
  }

  /**
   * Maps of maps only: makes `inner` the map at `key`, on libuv's pool (the
   * kernel returns only after an RCU grace period, so programs that read the
   * old inner map have finished). `inner` may be closed as soon as this is
   * called; the outer map holds it from then on.
   */
  setInnerMap(key: Uint8Array, inner: RawMap, mode: UpdateMode = 'any'): Promise<void> {
    return bpfAsync(() => nativeBpf().mapSetInner(this.#handle, key, inner.handle(), UpdateFlag[mode]));
  }

  /** Maps of maps only: removes the inner map at `key`, on libuv's pool; false when there was none. */
  deleteInnerMap(key: Uint8Array): Promise<boolean> {
    return bpfAsync(() => nativeBpf().mapDeleteInner(this.#handle, key));
  }

  /** The key after `key` (the first key without one), or undefined at the end. */
  nextKey(key?: Uint8Array): Buffer | undefined {
    return bpfSync(() => nativeBpf().mapNextKey(this.#handle, key ?? null));
  }

  /**
   * Writes many entries: BPF_MAP_UPDATE_BATCH where the map type supports it
   * (hash and array kinds), one update per entry otherwise (LPM trie). A
   * failure says how many entries were written before it (`processed` on the
   * cause, and in the operation). Maps of maps refuse (TypeError): their
   * values are fds, set one at a time with setInnerMap.
   */
  async updateBatch(entries: ReadonlyArray<readonly [Uint8Array, Uint8Array]>, mode: UpdateMode = 'any'): Promise<{ count: number; batched: boolean }> {
    const { keySize, valueBufferSize } = this.info;
    let count = 0;
    let batched = entries.length > 0;
    for (let start = 0; start < entries.length; start += BATCH_CHUNK) {
      const chunk = entries.slice(start, start + BATCH_CHUNK);
      const keys = Buffer.alloc(chunk.length * keySize);
      const values = Buffer.alloc(chunk.length * valueBufferSize);
      chunk.forEach(([k, v], i) => {
        if (k.length !== keySize) throw new RangeError(`key ${start + i} of map ${this.name} must be ${keySize} bytes, got ${k.length}`);
        if (v.length !== valueBufferSize) throw new RangeError(`value ${start + i} of map ${this.name} must be ${valueBufferSize} bytes, got ${v.length}`);
        keys.set(k, i * keySize);
        values.set(v, i * valueBufferSize);
      });
      const r = await bpfAsync(() => nativeBpf().mapUpdateBatch(this.#handle, keys, values, chunk.length, UpdateFlag[mode]));
      count += r.count;
      batched &&= r.batched;
    }
    return { count, batched };
  }

  /**
   * Every entry, walked with BPF_MAP_GET_NEXT_KEY in chunks on libuv's pool.
   * Entries changed during the walk may or may not be seen; a hash map whose
   * current key is deleted meanwhile restarts from its first bucket, so a key
   * can then be seen twice.
   */
  async *entries(): AsyncGenerator<[Buffer, Buffer]> {
    for await (const chunk of this.#chunks(true)) yield* chunk as Array<[Buffer, Buffer]>;
  }

  async *keys(): AsyncGenerator<Buffer> {
    for await (const chunk of this.#chunks(false)) for (const [k] of chunk) yield k;
  }

  /**
   * A hash map's keys in chunks of up to `size` (back to back in one
   * buffer), from BPF_MAP_LOOKUP_BATCH: each chunk is one short kernel call,
   * and the walk goes on from a bucket, not a key, so the caller may delete
   * any key while it walks. A bucket with more entries than `size` fails
   * (ENOSPC).
   */
  async *keyChunks(size: number): AsyncGenerator<{ keys: Buffer; count: number }> {
    let cursor: Buffer | null = null;
    for (;;) {
      const r: { count: number; keys: Buffer; cursor: Buffer | null } = await bpfAsync(() => nativeBpf().mapLookupBatch(this.#handle, cursor, size));
      if (r.count > 0) yield { keys: r.keys, count: r.count };
      if (r.cursor === null) return;
      cursor = r.cursor;
    }
  }

  async *#chunks(withValues: boolean): AsyncGenerator<Array<[Buffer, Buffer | undefined]>> {
    const { keySize, valueBufferSize } = this.info;
    let after: Buffer | null = null;
    for (;;) {
      const r = await bpfAsync(() => nativeBpf().mapDump(this.#handle, after, DUMP_CHUNK, withValues));
      const out: Array<[Buffer, Buffer | undefined]> = [];
      for (let i = 0; i < r.count; i++) {
        out.push([r.keys.subarray(i * keySize, (i + 1) * keySize), r.values?.subarray(i * valueBufferSize, (i + 1) * valueBufferSize)]);
      }
      if (out.length > 0) yield out;
      if (!r.more || r.count === 0) return;
      after = r.keys.subarray((r.count - 1) * keySize, r.count * keySize);
    }
  }

  /** BPF_OBJ_PIN: the map outlives this process until the pin is removed. */
  pin(path: string): void {
    bpfSync(() => nativeBpf().objPin(this.#handle, path));
  }

  /** Closes this process's fd (idempotent); pinned or in-use maps live on. */
  close(): void {
    nativeBpf().close(this.#handle);
  }
}

/** Marks a per-CPU value codec so maps can check it slot by slot. */
export interface PerCpuCodec<T> extends Codec<T[]> {
  readonly slot: Codec<T>;
  readonly cpus: number;
}

/** A per-CPU value codec sized for this machine's possible CPUs. */
export function perCpuValue<T>(slot: Codec<T>): PerCpuCodec<T> {
  const cpus = possibleCpus();
  return Object.assign(perCpu(slot, cpus), { slot, cpus });
}

function isPerCpuCodec(c: Codec<unknown>): c is PerCpuCodec<unknown> {
  return 'slot' in c && 'cpus' in c;
}

/** Wraps a raw map in a typed view, closing the raw map when the view refuses it. */
export function adopt<T>(raw: RawMap, wrap: (raw: RawMap) => T): T {
  try {
    return wrap(raw);
  } catch (err) {
    raw.close();
    throw err;
  }
}

/** A map spec whose key and value sizes come from codecs. */
export type TypedMapSpec = Omit<MapSpec, 'keySize' | 'valueSize'>;

/** The map value size a codec stands for (one CPU's slot for per-CPU codecs). */
function valueSizeOf(value: Codec<unknown>): number {
  return isPerCpuCodec(value) ? value.slot.size : value.size;
}

function specWithSizes(spec: TypedMapSpec, key: Codec<unknown>, value: Codec<unknown>): MapSpec {
  return { ...spec, keySize: key.size, valueSize: valueSizeOf(value) };
}

/**
 * A map with typed keys and values. The codecs are checked against the
 * kernel's sizes once, here, so a struct that drifted from its C definition
 * fails at open time rather than corrupting entries. Maps of maps are
 * refused: their values are inner maps (see MapOfMaps).
 */
export class BpfMap<K, V> {
  constructor(
    readonly raw: RawMap,
    readonly keyCodec: Codec<K>,
    readonly valueCodec: Codec<V>,
  ) {
    const { info } = raw;
    if (raw.isMapOfMaps) throw new TypeError(`map ${info.name} is a map of maps: open it as a MapOfMaps`);
    if (keyCodec.size !== info.keySize) throw new RangeError(`key codec is ${keyCodec.size} bytes, map ${info.name} has ${info.keySize}-byte keys`);
    if (PER_CPU_MAP_TYPES.has(info.type)) {
      if (!isPerCpuCodec(valueCodec)) throw new TypeError(`map ${info.name} is per-CPU: its value codec must come from perCpuValue()`);
      if (valueCodec.slot.size !== info.valueSize || valueCodec.size !== info.valueBufferSize) {
        throw new RangeError(
          `value codec is ${valueCodec.cpus} × ${valueCodec.slot.size} bytes, map ${info.name} has ${info.valueSize}-byte values (${info.valueBufferSize} bytes for all CPUs)`,
        );
      }
    } else if (valueCodec.size !== info.valueSize) {
      throw new RangeError(`value codec is ${valueCodec.size} bytes, map ${info.name} has ${info.valueSize}-byte values`);
    }
  }

  /** See RawMap.create. */
  static async create<K, V>(spec: TypedMapSpec, key: Codec<K>, value: Codec<V>): Promise<BpfMap<K, V>> {
    return adopt(await RawMap.create(specWithSizes(spec, key, value)), (raw) => new BpfMap(raw, key, value));
  }

  /**
   * Opens a pinned map. Its key and value sizes must match the codecs (and
   * type, max entries and flags must match `expect` where given), else an
   * EINVAL KernelError says what differs.
   */
  static openPinned<K, V>(path: string, key: Codec<K>, value: Codec<V>, expect: Omit<MapShape, 'keySize' | 'valueSize'> = {}): BpfMap<K, V> {
    const raw = RawMap.openPinned(path, { ...expect, keySize: key.size, valueSize: valueSizeOf(value) });
    return adopt(raw, (r) => new BpfMap(r, key, value));
  }

  /** See RawMap.openOrCreatePinned. */
  static async openOrCreatePinned<K, V>(path: string, spec: TypedMapSpec, key: Codec<K>, value: Codec<V>): Promise<{ map: BpfMap<K, V>; created: boolean }> {
    const { map, created } = await RawMap.openOrCreatePinned(path, specWithSizes(spec, key, value));
    return { map: adopt(map, (raw) => new BpfMap(raw, key, value)), created };
  }

  get name(): string {
    return this.raw.name;
  }

  get info(): MapInfo {
    return this.raw.info;
  }

  get(key: K): V | undefined {
    const v = this.raw.lookup(encode(this.keyCodec, key));
    return v === undefined ? undefined : decode(this.valueCodec, v);
  }

  has(key: K): boolean {
    return this.raw.lookup(encode(this.keyCodec, key)) !== undefined;
  }

  /** Sets a value; 'noexist' fails with EEXIST on a present key, 'exist' with ENOENT on an absent one. */
  set(key: K, value: V, mode: UpdateMode = 'any'): void {
    this.raw.update(encode(this.keyCodec, key), encode(this.valueCodec, value), mode);
  }

  delete(key: K): boolean {
    return this.raw.delete(encode(this.keyCodec, key));
  }

  nextKey(key?: K): K | undefined {
    const next = this.raw.nextKey(key === undefined ? undefined : encode(this.keyCodec, key));
    return next === undefined ? undefined : decode(this.keyCodec, next);
  }

  /** Writes many entries (see RawMap.updateBatch). */
  setMany(entries: Iterable<readonly [K, V]>, mode: UpdateMode = 'any'): Promise<{ count: number; batched: boolean }> {
    const raw: Array<[Buffer, Buffer]> = [];
    for (const [k, v] of entries) raw.push([encode(this.keyCodec, k), encode(this.valueCodec, v)]);
    return this.raw.updateBatch(raw, mode);
  }

  async *entries(): AsyncGenerator<[K, V]> {
    for await (const [k, v] of this.raw.entries()) yield [this.keyCodec.read(k, 0), this.valueCodec.read(v, 0)];
  }

  async *keys(): AsyncGenerator<K> {
    for await (const k of this.raw.keys()) yield this.keyCodec.read(k, 0);
  }

  pin(path: string): void {
    this.raw.pin(path);
  }

  close(): void {
    this.raw.close();
  }
}
