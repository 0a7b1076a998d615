/**
 * The load-balancer's maps of both families behind one view, so that
 * LbMaps writes a service the same way whatever its family: tendril_lb4_*
 * and tendril_lb6_* hold the same entries with 4- or 16-byte addresses.
 * A frontend key carries its family (its address); a backend or a reverse
 * NAT entry is keyed by an ID shared by both families, so its family is
 * its value's address, and an ID lives in one family's map at a time.
 */
import type { IpAddress, IpFamily } from '../../netip/index.js';
import type { BpfMap } from '../kernel/bpf/index.js';

/** What LbMaps uses of a typed map. */
export interface LbMapView<K, V> {
  readonly name: string;
  get(key: K): V | undefined;
  set(key: K, value: V): void;
  delete(key: K): boolean;
  entries(): AsyncGenerator<[K, V]>;
  keys(): AsyncGenerator<K>;
}

/** Two maps whose keys name their family (a frontend): each key goes to its family's map. */
export class KeyFamilyMaps<K extends { address: IpAddress }, V> implements LbMapView<K, V> {
  constructor(
    readonly v4: BpfMap<K, V>,
    readonly v6: BpfMap<K, V>,
  ) {}

  get name(): string {
    return `${this.v4.name}/${this.v6.name}`;
  }

  #of(key: K): BpfMap<K, V> {
    return key.address.family === 6 ? this.v6 : this.v4;
  }

  get(key: K): V | undefined {
    return this.#of(key).get(key);
  }

  set(key: K, value: V): void {
    this.#of(key).set(key, value);
  }

  delete(key: K): boolean {
    return this.#of(key).delete(key);
  }

  async *entries(): AsyncGenerator<[K, V]> {
    yield* this.v4.entries();
    yield* this.v6.entries();
  }

  async *keys(): AsyncGenerator<K> {
    yield* this.v4.keys();
    yield* this.v6.keys();
  }
}

/**
 * Two maps keyed by an ID both families share, whose values name their
 * family (an address): a value goes to its family's map and leaves the
 * other's (an ID reused for the other family must not stay visible there).
 */
export class ValueFamilyMaps<V extends { address: IpAddress }> implements LbMapView<number, V> {
  constructor(
    readonly v4: BpfMap<number, V>,
    readonly v6: BpfMap<number, V>,
  ) {}

  get name(): string {
    return `${this.v4.name}/${this.v6.name}`;
  }

  get(id: number): V | undefined {
    return this.v4.get(id) ?? this.v6.get(id);
  }

  /** The family of the entry under `id`, if any. */
  familyOf(id: number): IpFamily | undefined {
    if (this.v4.has(id)) return 4;
    return this.v6.has(id) ? 6 : undefined;
  }

  set(id: number, value: V): void {
    const [mine, other] = value.address.family === 6 ? [this.v6, this.v4] : [this.v4, this.v6];
    mine.set(id, value);
    other.delete(id);
  }

  delete(id: number): boolean {
    const a = this.v4.delete(id);
    const b = this.v6.delete(id);
    return a || b;
  }

  async *entries(): AsyncGenerator<[number, V]> {
    yield* this.v4.entries();
    yield* this.v6.entries();
  }

  async *keys(): AsyncGenerator<number> {
    yield* this.v4.keys();
    yield* this.v6.keys();
  }
}
