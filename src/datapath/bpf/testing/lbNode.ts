/**
 * The service side of the node for the program tests: typed access to the
 * tendril_lb4_* maps of a loaded object, services written as the agent
 * writes them (members, slot 0, slots 1..count, reverse NAT entry), Maglev
 * tables as inner arrays, and the service conntrack entries.
 */
import { parseIp, parsePrefix } from '../../../netip/index.js';
import { codec, type BpfMap, type MapOfMaps, RawMap } from '../../kernel/bpf/index.js';
import { BackendState, CtKeyFlag, LbScope, MapName } from '../constants.js';
import {
  lb4AffinityKey,
  lb4AffinityValue,
  lb4Backend,
  lb4Key,
  lb4MemberKey,
  lb4ReverseNat,
  lb4Service,
  lb6AffinityKey,
  lb6Backend,
  lb6Key,
  lb6ReverseNat,
  lbSourceRangeKey,
  type CtEntryValue,
  type Lb4BackendValue,
  type Lb4Key,
  type Lb4ServiceValue,
  type Lb6BackendValue,
  type Lb6Key,
  type LbSourceRangeKey,
} from '../layout.js';
import type { CtTuple, ProgramHarness } from './programHarness.js';

/** BPF_F_INNER_MAP: inner maps may differ in max_entries from the template. */
const BPF_F_INNER_MAP = 1 << 12;

export interface TestFrontend {
  ip: string;
  port: number;
  proto: number;
}

export interface TestBackend {
  id: number;
  ip: string;
  port: number;
  proto: number;
  state?: number;
}

export interface TestService {
  id: number;
  frontend: TestFrontend;
  /** Backend IDs in slots 1..n. */
  backends: readonly number[];
  /** ServiceFlag bits. */
  flags?: number;
  affinityTimeout?: number;
  scope?: number;
  /** Skip the reverse NAT entry (a service being deleted). */
  noRevNat?: boolean;
  /** Members besides the slots' backends (a terminating backend). */
  members?: readonly number[];
}

export class LbNode {
  readonly services: BpfMap<Lb4Key, Lb4ServiceValue>;
  readonly backends: BpfMap<number, Lb4BackendValue>;
  readonly revNat: BpfMap<number, ReturnType<typeof lb4ReverseNat.read>>;
  readonly affinity: BpfMap<ReturnType<typeof lb4AffinityKey.read>, ReturnType<typeof lb4AffinityValue.read>>;
  readonly maglev: MapOfMaps<number>;
  readonly members: BpfMap<ReturnType<typeof lb4MemberKey.read>, number>;
  readonly sourceRanges: BpfMap<LbSourceRangeKey, number>;
  /** IPv6 services (tendril_lb6_*): a frontend or backend of family 6 goes here; Maglev and members are shared. */
  readonly services6: BpfMap<Lb6Key, Lb4ServiceValue>;
  readonly backends6: BpfMap<number, Lb6BackendValue>;
  readonly revNat6: BpfMap<number, ReturnType<typeof lb6ReverseNat.read>>;
  readonly affinity6: BpfMap<ReturnType<typeof lb6AffinityKey.read>, ReturnType<typeof lb4AffinityValue.read>>;
  readonly #inner: RawMap[] = [];

  constructor(readonly h: ProgramHarness) {
    this.services = h.object.map(MapName.LB_SERVICES, lb4Key, lb4Service);
    this.backends = h.object.map(MapName.LB_BACKENDS, codec.u32, lb4Backend);
    this.revNat = h.object.map(MapName.LB_REVNAT, codec.u16, lb4ReverseNat);
    this.affinity = h.object.map(MapName.LB_AFFINITY, lb4AffinityKey, lb4AffinityValue);
    this.maglev = h.object.mapOfMaps(MapName.LB_MAGLEV, codec.u32);
    this.members = h.object.map(MapName.LB_MEMBERS, lb4MemberKey, codec.u8);
    this.sourceRanges = h.object.map(MapName.LB_SOURCE_RANGES, lbSourceRangeKey, codec.u8);
    this.services6 = h.object.map(MapName.LB6_SERVICES, lb6Key, lb4Service);
    this.backends6 = h.object.map(MapName.LB6_BACKENDS, codec.u32, lb6Backend);
    this.revNat6 = h.object.map(MapName.LB6_REVNAT, codec.u16, lb6ReverseNat);
    this.affinity6 = h.object.map(MapName.LB6_AFFINITY, lb6AffinityKey, lb4AffinityValue);
  }

  /** Backend `backendId` is one of service `id`'s (tendril_lb4_member). */
  addMember(id: number, backendId: number): void {
    this.members.set({ revNatIndex: id, backendId }, 1);
  }

  /** Service `id` (with ServiceFlag.SOURCE_RANGES) takes sources inside `cidr`. */
  addSourceRange(id: number, cidr: string): void {
    this.sourceRanges.set({ serviceId: id, prefix: parsePrefix(cidr) }, 1);
  }

  /** Backend `backendId` left service `id`. */
  removeMember(id: number, backendId: number): void {
    this.members.delete({ revNatIndex: id, backendId });
  }

  addBackend(b: TestBackend): void {
    const state = b.state ?? BackendState.ACTIVE;
    if (parseIp(b.ip).family === 6) return this.backends6.set(b.id, { address: parseIp(b.ip), port: b.port, proto: b.proto, state });
    this.backends.set(b.id, { address: parseIp(b.ip), port: b.port, proto: b.proto, state: b.state ?? BackendState.ACTIVE });
  }

  serviceKey(f: TestFrontend, slot = 0, scope: number = LbScope.EXTERNAL): Lb4Key {
    return { address: parseIp(f.ip), dport: f.port, backendSlot: slot, proto: f.proto, scope };
  }

  /** The members (slots' backends and `members`), slot 0, the backend slots, and (unless told) the reverse NAT entry. */
  addService(s: TestService): void {
    if (parseIp(s.frontend.ip).family === 6) return this.#addService6(s);
    const scope = s.scope ?? LbScope.EXTERNAL;
    for (const b of [...s.backends, ...(s.members ?? [])]) this.addMember(s.id, b);
    this.services.set(this.serviceKey(s.frontend, 0, scope), {
      backendId: 0,
      affinityTimeout: s.affinityTimeout ?? 0,
      count: s.backends.length,
      revNatIndex: s.id,
      flags: s.flags ?? 0,
    });
    s.backends.forEach((id, i) => {
      this.services.set(this.serviceKey(s.frontend, i + 1, scope), { backendId: id, affinityTimeout: 0, count: 0, revNatIndex: s.id, flags: 0 });
    });
    if (!s.noRevNat) this.revNat.set(s.id, { address: parseIp(s.frontend.ip), port: s.frontend.port });
  }

  #addService6(s: TestService): void {
    const scope = s.scope ?? LbScope.EXTERNAL;
    const key = (slot: number): Lb6Key => ({ address: parseIp(s.frontend.ip), dport: s.frontend.port, backendSlot: slot, proto: s.frontend.proto, scope });
    for (const b of [...s.backends, ...(s.members ?? [])]) this.addMember(s.id, b);
    this.services6.set(key(0), { backendId: 0, affinityTimeout: s.affinityTimeout ?? 0, count: s.backends.length, revNatIndex: s.id, flags: s.flags ?? 0 });
    s.backends.forEach((id, i) => {
      this.services6.set(key(i + 1), { backendId: id, affinityTimeout: 0, count: 0, revNatIndex: s.id, flags: 0 });
    });
    if (!s.noRevNat) this.revNat6.set(s.id, { address: parseIp(s.frontend.ip), port: s.frontend.port });
  }

  /** The service's Maglev table (slot → backend ID) as an inner array of exactly table.length entries. */
  async setMaglev(id: number, table: readonly number[]): Promise<void> {
    const inner = await RawMap.create({ name: `tdl_mag_${id}`, type: 'ARRAY', keySize: 4, valueSize: 4, maxEntries: table.length, flags: BPF_F_INNER_MAP });
    this.#inner.push(inner);
    const k = Buffer.alloc(4);
    const v = Buffer.alloc(4);
    table.forEach((backend, slot) => {
      k.writeUInt32LE(slot);
      v.writeUInt32LE(backend);
      inner.update(k, v);
    });
    await this.maglev.set(id, inner);
  }

  /** The service conntrack entry pinning a client's connection (its tuple to the frontend). */
  serviceCt(t: CtTuple): CtEntryValue | undefined {
    const key = { saddr: parseIp(t.saddr), daddr: parseIp(t.daddr), sport: t.sport, dport: t.dport, proto: t.proto, flags: CtKeyFlag.SERVICE };
    if (key.saddr.family === 6) return (t.proto === 6 ? this.h.ct6Tcp : this.h.ct6Any).get(key);
    return (t.proto === 6 ? this.h.ctTcp : this.h.ctAny).get(key);
  }

  close(): void {
    for (const m of this.#inner.splice(0)) m.close();
  }
}
