import { type Codec, decode, encode, u32 } from './codec.js';
import { type UpdateMode } from './constants.js';
import { type MapInfo, type MapShape, type MapSpec, RawMap, adopt } from './map.js';

/** A map of maps' value: the inner map's fd going in, its map ID coming out. */
const INNER_VALUE_SIZE = 4;

export interface MapOfMapsSpec {
  /** The kernel's name for the map (15 bytes at most). */
  name: string;
  type: 'ARRAY_OF_MAPS' | 'HASH_OF_MAPS';
  maxEntries: number;
  flags?: number;
  /** A map of the shape every inner map must have: the kernel refuses others on set (EINVAL). */
  innerMap: RawMap;
}

/** A map that can go into a map of maps: a RawMap or any typed view of one. */
export type InnerMap = RawMap | { readonly raw: RawMap };

function rawOf(inner: InnerMap): RawMap {
  return inner instanceof RawMap ? inner : inner.raw;
}

function rawSpec(spec: MapOfMapsSpec, key: Codec<unknown>): MapSpec {
  return { ...spec, keySize: key.size, valueSize: INNER_VALUE_SIZE };
}

/**
 * An ARRAY_OF_MAPS or HASH_OF_MAPS with typed keys. Its writes and deletes
 * return promises and run on libuv's pool: the kernel answers each only
 * after an RCU grace period (4 to 40 ms measured), which the event loop must
 * not wait out. Reads are synchronous; they see inner maps by ID.
 */
export class MapOfMaps<K> {
  constructor(
    readonly raw: RawMap,
    readonly keyCodec: Codec<K>,
  ) {
    const { info } = raw;
    if (!raw.isMapOfMaps) throw new TypeError(`map ${info.name} is not a map of maps (ARRAY_OF_MAPS or HASH_OF_MAPS)`);
    if (keyCodec.size !== info.keySize) throw new RangeError(`key codec is ${keyCodec.size} bytes, map ${info.name} has ${info.keySize}-byte keys`);
  }

  /** BPF_MAP_CREATE on libuv's pool (see RawMap.create). */
  static async create<K>(spec: MapOfMapsSpec, key: Codec<K>): Promise<MapOfMaps<K>> {
    return adopt(await RawMap.create(rawSpec(spec, key)), (raw) => new MapOfMaps(raw, key));
  }

  /** Opens a pinned map of maps; another shape is refused with an EINVAL KernelError (see RawMap.openPinned). */
  static openPinned<K>(path: string, key: Codec<K>, expect: Omit<MapShape, 'keySize' | 'valueSize'> = {}): MapOfMaps<K> {
    const raw = RawMap.openPinned(path, { ...expect, keySize: key.size, valueSize: INNER_VALUE_SIZE });
    return adopt(raw, (r) => new MapOfMaps(r, key));
  }

  /** See RawMap.openOrCreatePinned. */
  static async openOrCreatePinned<K>(path: string, spec: MapOfMapsSpec, key: Codec<K>): Promise<{ map: MapOfMaps<K>; created: boolean }> {
    const { map, created } = await RawMap.openOrCreatePinned(path, rawSpec(spec, key));
    return { map: adopt(map, (raw) => new MapOfMaps(raw, key)), created };
  }

  get name(): string {
    return this.raw.name;
  }

  get info(): MapInfo {
    return this.raw.info;
  }

  /** The kernel's ID of the inner map at `key` (RawMap.info.id), or undefined when there is none. */
  innerMapId(key: K): number | undefined {
    const v = this.raw.lookup(encode(this.keyCodec, key));
    return v === undefined ? undefined : decode(u32, v);
  }

  has(key: K): boolean {
    return this.innerMapId(key) !== undefined;
  }

  /**
   * Puts `inner` at `key`; programs see it once the promise settles. The
   * outer map holds its own reference: `inner` may be closed right after
   * this call. 'noexist' fails with EEXIST on a present key, 'exist' with
   * ENOENT on an absent one.
   */
  set(key: K, inner: InnerMap, mode: UpdateMode = 'any'): Promise<void> {
    return this.raw.setInnerMap(encode(this.keyCodec, key), rawOf(inner), mode);
  }

  /** Removes the inner map at `key`; false when there was none. */
  delete(key: K): Promise<boolean> {
    return this.raw.deleteInnerMap(encode(this.keyCodec, key));
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
