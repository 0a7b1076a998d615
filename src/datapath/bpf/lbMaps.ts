/**
 * The load-balancer maps (tendril_lb4_svc/_be/_rev/_mag/_member) written for
 * the service subsystem. Every write is ordered so that a packet never sees
 * a half-written service: backends exist before a slot names them, members
 * before the slots that name them, slots 1..n before slot 0 exposes n of
 * them (and its flags), the internal scope and the Maglev table before a
 * flag points at them; on shrink slot 0 goes first, the slots it no longer
 * counts after, the members no slot names last. A failed upsert puts back
 * what it had changed.
 *
 * Neither conntrack nor the affinity map is ever walked here: a connection
 * (or a client's affinity) pinned to a backend that left its service or
 * vanished is noticed by the datapath on its next packet (lb4_select checks
 * tendril_lb4_member) and chosen again; the stale entry expires by itself.
 * So a service delete or a backend removal costs O(its own entries).
 *
 * A shadow of each service's keys (rebuilt from the pinned maps at start)
 * lets a change touch exactly what it must without walking the maps.
 */
import { UndoList } from '../../async/undoList.js';
import { Serializer } from '../../async/keyedSerializer.js';
import type { Logger } from '../../logging/logger.js';
import { formatIp, formatPrefix, type IpAddress, type IpPrefix, parsePrefix, tryParseIp } from '../../netip/index.js';
import { isKernelError } from '../kernel/errors.js';
import { BpfMap, codec, MapOfMaps, RawMap } from '../kernel/bpf/index.js';
import { DatapathError, type LbBackendEntry, type LbBackendState, type LbProtocol, type LbServiceEntry, type LoadBalancerDatapath } from '../types.js';
import { BackendState, LbScope, MapName, type MapNameValue, MAX_SERVICE_ID, ServiceFlag } from './constants.js';
import { KeyFamilyMaps, type LbMapView, ValueFamilyMaps } from './lbFamilyMaps.js';
import {
  lb4Backend,
  type Lb4BackendValue,
  lb4Key,
  type Lb4Key,
  lb4MemberKey,
  type Lb4MemberKey,
  lb4ReverseNat,
  type Lb4ReverseNatValue,
  lb4Service,
  type Lb4ServiceValue,
  lb6Backend,
  lb6Key,
  lb6ReverseNat,
  lbSourceRangeKey,
  type LbSourceRangeKey,
} from './layout.js';
import type { ServiceRoutes } from './serviceRoutes.js';

/** BPF_F_INNER_MAP: an inner map whose max_entries may differ from the outer map's template. */
export const BPF_F_INNER_MAP = 1 << 12;

export const PROTOCOL_NUMBER: Record<LbProtocol, number> = { TCP: 6, UDP: 17, SCTP: 132 };
export const BACKEND_STATE_NUMBER: Record<LbBackendState, number> = {
  active: BackendState.ACTIVE,
  terminating: BackendState.TERMINATING,
  quarantined: BackendState.QUARANTINED,
  maintenance: BackendState.MAINTENANCE,
};

/**
 * Services, backends and reverse NAT entries of both families (the lb4 and
 * lb6 maps behind one view each, lbFamilyMaps.ts); the Maglev tables and
 * members, keyed by IDs only (one ID space for both families), are one map
 * each.
 */
export interface LbMapSet {
  services: LbMapView<Lb4Key, Lb4ServiceValue>;
  backends: ValueFamilyMaps<Lb4BackendValue>;
  revNat: ValueFamilyMaps<Lb4ReverseNatValue>;
  maglev: MapOfMaps<number>;
  members: BpfMap<Lb4MemberKey, number>;
  sourceRanges: BpfMap<LbSourceRangeKey, number>;
}

/** The load-balancer's typed views of the datapath's maps, given a way to find each raw map by name. */
export function lbMapSet(raw: (name: MapNameValue) => RawMap): LbMapSet {
  return {
    services: new KeyFamilyMaps(new BpfMap(raw(MapName.LB_SERVICES), lb4Key, lb4Service), new BpfMap(raw(MapName.LB6_SERVICES), lb6Key, lb4Service)),
    backends: new ValueFamilyMaps(new BpfMap(raw(MapName.LB_BACKENDS), codec.u32, lb4Backend), new BpfMap(raw(MapName.LB6_BACKENDS), codec.u32, lb6Backend)),
    revNat: new ValueFamilyMaps(new BpfMap(raw(MapName.LB_REVNAT), codec.u16, lb4ReverseNat), new BpfMap(raw(MapName.LB6_REVNAT), codec.u16, lb6ReverseNat)),
    maglev: new MapOfMaps(raw(MapName.LB_MAGLEV), codec.u32),
    members: new BpfMap(raw(MapName.LB_MEMBERS), lb4MemberKey, codec.u8),
    sourceRanges: new BpfMap(raw(MapName.LB_SOURCE_RANGES), lbSourceRangeKey, codec.u8),
  };
}

export interface LbMapsOptions {
  maps: LbMapSet;
  routes: ServiceRoutes;
  log: Logger;
  /** Entries of every Maglev table (a prime). */
  maglevTableSize: number;
}

/** A frontend as the maps key it (without slot and scope). */
interface Frontend {
  address: IpAddress;
  port: number;
  proto: number;
}

/** What the maps hold for one service ID. */
interface ServiceShadow {
  frontend: Frontend;
  flags: number;
  /** Slots written per scope (slot 0's count). */
  counts: Map<number, number>;
  /** The backend in each slot per scope (slot i at index i-1), so a backend's users are found without map reads. */
  slots: Map<number, readonly number[]>;
  /** The backends tendril_lb4_member holds for the service: its connections to them are kept. */
  members: Set<number>;
  /** The frontend address whose route to tendril_host the service holds (a ClusterIP, external IP or LoadBalancer address). */
  routeAddress?: string;
  /** Its loadBalancerSourceRanges in tendril_lb_srcrange, as formatPrefix writes them (absent: none). */
  ranges?: Set<string>;
}


/**
 * Whether the node's own connections to the frontend need a route to
 * tendril_host: a ClusterIP, external IP or LoadBalancer address (a
 * NodePort is on the node's addresses, reached over lo).
 */
function routedFrontend(flags: number, f: Frontend): boolean {
  // Either family: bpf_host translates the node's own IPv4 and IPv6 connections alike.
  return (flags & ServiceFlag.NODEPORT) === 0 && f.address.bits !== 0n;
}

function frontendText(f: Frontend): string {
  return `${formatIp(f.address)}:${f.port}/${f.proto}`;
}

function sameFrontend(a: Frontend, b: Frontend): boolean {
  return a.address.family === b.address.family && a.address.bits === b.address.bits && a.port === b.port && a.proto === b.proto;
}

function key(f: Frontend, slot: number, scope: number): Lb4Key {
  return { address: f.address, dport: f.port, backendSlot: slot, proto: f.proto, scope };
}

function memberKey(serviceId: number, backendId: number): Lb4MemberKey {
  return { revNatIndex: serviceId, backendId };
}

/** Every backend the datapath must keep a service's connections to: the listed members, the slots' and the Maglev table's. */
function membersOf(svc: LbServiceEntry): Set<number> {
  const out = new Set<number>([...(svc.memberIds ?? []), ...svc.backendIds, ...(svc.internalBackendIds ?? [])]);
  for (const b of svc.maglevTable ?? []) if (b !== 0) out.add(b);
  return out;
}

function invalid(message: string): DatapathError {
  return new DatapathError('failed', message);
}

function wrap(what: string, err: unknown): DatapathError {
  if (err instanceof DatapathError) return err;
  const full = isKernelError(err, 'E2BIG', 'ENOMEM', 'ENOSPC') ? `${what}: the map is full (${(err as Error).message})` : `${what}: ${(err as Error).message}`;
  return new DatapathError('failed', full, [], '', { cause: err });
}

/** A service or backend address of either family (a service is one family: its backends are checked against its frontend). */
function address(text: string, what: string): IpAddress {
  const ip = tryParseIp(text);
  if (!ip) throw invalid(`${what} ${JSON.stringify(text)} is not an IP address`);
  return ip;
}

function checkPort(port: number, what: string, allowZero = false): void {
  if (!Number.isInteger(port) || port < (allowZero ? 0 : 1) || port > 65535) throw invalid(`${what} port ${port} is outside ${allowZero ? 0 : 1}..65535`);
}

function checkId(id: number, what: string, max = 0xffffffff): void {
  if (!Number.isInteger(id) || id < 1 || id > max) throw invalid(`${what} ID ${id} is outside 1..${max}`);
}

/** The service flags an entry asks for. */
export function serviceFlags(svc: LbServiceEntry): number {
  let flags = 0;
  if (svc.type === 'NodePort') flags |= ServiceFlag.NODEPORT;
  else if (svc.type === 'ExternalIPs') flags |= ServiceFlag.EXTERNAL_IP;
  else if (svc.type === 'LoadBalancer') flags |= ServiceFlag.LOADBALANCER;
  if (svc.localTraffic) flags |= ServiceFlag.LOCAL_TRAFFIC;
  if (svc.affinityTimeoutSec > 0) flags |= ServiceFlag.AFFINITY;
  if (svc.maglevTable !== undefined) flags |= ServiceFlag.MAGLEV;
  if (svc.internalBackendIds !== undefined) flags |= ServiceFlag.TWO_SCOPES;
  if ((svc.sourceRanges?.length ?? 0) > 0) flags |= ServiceFlag.SOURCE_RANGES;
  return flags;
}

const UNDO_FAILED = 'putting back a load-balancer map entry after a failed change failed';

export class LbMaps implements LoadBalancerDatapath {
  readonly #services = new Map<number, ServiceShadow>();
  /** Service IDs by frontend (frontendText): a frontend's holder is found without walking every service. */
  readonly #byFrontend = new Map<string, Set<number>>();
  /** Backend IDs the backend map holds. */
  readonly #backends = new Set<number>();
  /** Services whose Maglev inner map is in tendril_lb4_mag. */
  readonly #maglev = new Set<number>();
  /** Backends each Maglev table written by this process names (a table found at start is not read back). */
  readonly #maglevBackends = new Map<number, Set<number>>();
  /** One change at a time: each reads the shadow another would change. */
  readonly #queue = new Serializer();

  private constructor(private readonly opts: LbMapsOptions) {}

  /** Reads what the pinned maps hold (a previous run's services survive a restart). */
  static async open(opts: LbMapsOptions): Promise<LbMaps> {
    const lb = new LbMaps(opts);
    const { maps } = opts;
    const slotEntries: Array<[Lb4Key, Lb4ServiceValue]> = [];
    for await (const [k, v] of maps.services.entries()) {
      if (k.backendSlot !== 0) {
        slotEntries.push([k, v]);
        continue;
      }
      const id = v.revNatIndex;
      let s = lb.#services.get(id);
      if (!s) {
        s = { frontend: { address: k.address, port: k.dport, proto: k.proto }, flags: 0, counts: new Map(), slots: new Map(), members: new Set() };
        lb.#services.set(id, s);
      }
      s.counts.set(k.scope, v.count);
      if (k.scope === LbScope.EXTERNAL) {
        s.flags = v.flags;
        s.frontend = { address: k.address, port: k.dport, proto: k.proto };
      }
    }
    for (const [k, v] of slotEntries) {
      const s = lb.#services.get(v.revNatIndex);
      const count = s?.counts.get(k.scope);
      if (!s || count === undefined || k.backendSlot > count || !sameFrontend(s.frontend, { address: k.address, port: k.dport, proto: k.proto })) continue;
      let ids = s.slots.get(k.scope) as number[] | undefined;
      if (!ids) s.slots.set(k.scope, (ids = new Array<number>(count).fill(0)));
      ids[k.backendSlot - 1] = v.backendId;
    }
    for (const [id, s] of lb.#services) {
      lb.#index(id, s);
      if (routedFrontend(s.flags, s.frontend)) {
        s.routeAddress = formatIp(s.frontend.address);
        opts.routes.adopt(id, s.routeAddress);
      }
    }
    for await (const id of maps.backends.keys()) lb.#backends.add(id);
    for await (const id of maps.maglev.keys()) lb.#maglev.add(id);
    // A member of a service no shadow has stays in the map until restoreDone removes strays.
    for await (const k of maps.members.keys()) lb.#services.get(k.revNatIndex)?.members.add(k.backendId);
    for await (const k of maps.sourceRanges.keys()) {
      const s = lb.#services.get(k.serviceId);
      if (s) (s.ranges ??= new Set()).add(formatPrefix(k.prefix));
    }
    lb.#seedMembers();
    return lb;
  }

  /**
   * A service found without any member (maps pinned by a datapath that had
   * no tendril_lb4_member): its slots' backends become members at once, so
   * the programs loaded now keep its connections until the agent writes the
   * service whole again (restore). Best effort: a failure only costs those
   * connections a new choice.
   */
  #seedMembers(): void {
    for (const [id, s] of this.#services) {
      if (s.members.size > 0) continue;
      for (const slots of s.slots.values()) {
        for (const b of slots) {
          if (b === 0 || s.members.has(b)) continue;
          try {
            this.opts.maps.members.set(memberKey(id, b), 1);
            s.members.add(b);
          } catch (err) {
            this.opts.log.warn({ service: id, backend: b, err }, 'adding a found service\'s backend to its members failed');
          }
        }
      }
    }
  }

  #index(id: number, s: ServiceShadow): void {
    const text = frontendText(s.frontend);
    let ids = this.#byFrontend.get(text);
    if (!ids) this.#byFrontend.set(text, (ids = new Set()));
    ids.add(id);
  }

  #unindex(id: number, s: ServiceShadow): void {
    const text = frontendText(s.frontend);
    const ids = this.#byFrontend.get(text);
    ids?.delete(id);
    if (ids?.size === 0) this.#byFrontend.delete(text);
  }

  #setShadow(id: number, s: ServiceShadow): void {
    const old = this.#services.get(id);
    if (old) this.#unindex(id, old);
    this.#services.set(id, s);
    this.#index(id, s);
  }

  #dropShadow(id: number): void {
    const old = this.#services.get(id);
    if (!old) return;
    this.#unindex(id, old);
    this.#services.delete(id);
  }

  /** Service IDs the maps hold. */
  serviceIds(): number[] {
    return [...this.#services.keys()].sort((a, b) => a - b);
  }

  backendIds(): number[] {
    return [...this.#backends].sort((a, b) => a - b);
  }

  #serial<T>(fn: () => Promise<T>): Promise<T> {
    return this.#queue.run(fn);
  }

  /** The router address is known (setupNode): routes to ClusterIPs go in with it as their source. */
  setRouter(router: string): Promise<void> {
    return this.#serial(() => this.opts.routes.setRouter(router));
  }

  upsertBackends(backends: readonly LbBackendEntry[]): Promise<void> {
    return this.#serial(() => this.#upsertBackends(backends));
  }

  async #upsertBackends(backends: readonly LbBackendEntry[]): Promise<void> {
    const { maps } = this.opts;
    const entries: Array<[number, Lb4BackendValue]> = backends.map((b) => {
      checkId(b.id, 'backend');
      checkPort(b.port, `backend ${b.id}`);
      const state = BACKEND_STATE_NUMBER[b.state];
      const proto = PROTOCOL_NUMBER[b.protocol];
      if (state === undefined) throw invalid(`backend ${b.id}: unknown state ${JSON.stringify(b.state)}`);
      if (proto === undefined) throw invalid(`backend ${b.id}: unknown protocol ${JSON.stringify(b.protocol)}`);
      return [b.id, { address: address(b.address, `backend ${b.id} address`), port: b.port, proto, state }];
    });
    const undo = new UndoList();
    try {
      for (const [id, value] of entries) {
        // #backends is what the map holds (read at start, kept since): a new ID has nothing to put back, and no lookup is spent on it.
        const previous = this.#backends.has(id) ? maps.backends.get(id) : undefined;
        maps.backends.set(id, value);
        undo.add(() => (previous ? maps.backends.set(id, previous) : void maps.backends.delete(id)), `backend ${id}`);
      }
    } catch (err) {
      await undo.rollBack(this.opts.log, UNDO_FAILED);
      throw wrap(`writing backends to ${maps.backends.name}`, err);
    }
    for (const [id] of entries) this.#backends.add(id);
  }

  deleteBackends(ids: readonly number[]): Promise<void> {
    return this.#serial(() => this.#deleteBackends(ids));
  }

  async #deleteBackends(ids: readonly number[]): Promise<void> {
    const gone = new Set(ids);
    if (gone.size === 0) return;
    const inSlots = this.#slottedBackends(gone);
    if (inSlots.length > 0) {
      throw new DatapathError('refused', `backends a service still has cannot go (remove them from the services first): ${inSlots.map(([b, s]) => `backend ${b} in service ${s}`).join(', ')}`);
    }
    const { maps } = this.opts;
    // Connections still pinned to them choose again on their next packet (lb4_select finds no backend): nothing to walk.
    try {
      for (const id of gone) {
        maps.backends.delete(id);
        this.#backends.delete(id);
      }
    } catch (err) {
      throw wrap(`deleting backends from ${maps.backends.name}`, err);
    }
  }

  /** (backend, service) pairs of `ids` that some slot, Maglev table or membership still names. */
  #slottedBackends(ids: ReadonlySet<number>): Array<[number, number]> {
    const out = new Map<string, [number, number]>();
    const add = (b: number, id: number) => out.set(`${b}/${id}`, [b, id]);
    for (const [id, names] of this.#maglevBackends) for (const b of names) if (ids.has(b)) add(b, id);
    for (const [id, s] of this.#services) {
      for (const slots of s.slots.values()) for (const b of slots) if (ids.has(b)) add(b, id);
      for (const b of s.members) if (ids.has(b)) add(b, id);
    }
    return [...out.values()];
  }

  /** The batch's frontend routes go in as netlink batches when `fn` returns (ServiceRoutes.deferInstalls). */
  inBatch<T>(fn: () => Promise<T>): Promise<T> {
    return this.opts.routes.deferInstalls(fn);
  }

  upsertService(svc: LbServiceEntry): Promise<void> {
    return this.#serial(() => this.#upsertService(svc));
  }

  async #upsertService(svc: LbServiceEntry): Promise<void> {
    checkId(svc.id, 'service', MAX_SERVICE_ID);
    const proto = PROTOCOL_NUMBER[svc.protocol];
    if (proto === undefined) throw invalid(`service ${svc.id}: unknown protocol ${JSON.stringify(svc.protocol)}`);
    checkPort(svc.port, `service ${svc.id}`);
    const frontend: Frontend = { address: address(svc.address, `service ${svc.id} frontend`), port: svc.port, proto };
    if (frontend.address.bits === 0n && svc.type !== 'NodePort') throw invalid(`service ${svc.id}: only a NodePort frontend may have address 0.0.0.0`);
    // The IPv6 datapath answers a service's own address only (a reply's frontend comes from its reverse NAT entry):
    // the service subsystem writes a NodePort on :: as one entry per node IPv6 address (src/service/frontends.ts).
    if (frontend.address.bits === 0n && frontend.address.family === 6) throw invalid(`service ${svc.id}: an IPv6 frontend on :: has no reverse NAT address; write one entry per node IPv6 address`);
    const scopes = new Map<number, readonly number[]>([[LbScope.EXTERNAL, svc.backendIds]]);
    if (svc.internalBackendIds !== undefined) scopes.set(LbScope.INTERNAL, svc.internalBackendIds);
    for (const ids of scopes.values()) {
      if (ids.length > 0xffff) throw invalid(`service ${svc.id}: ${ids.length} backends do not fit a slot count`);
      const missing = ids.filter((b) => !this.#backends.has(b));
      if (missing.length > 0) throw new DatapathError('not-found', `service ${svc.id}: backends ${missing.join(', ')} are not in the backend map (upsert them first)`);
      const foreign = ids.filter((b) => this.opts.maps.backends.familyOf(b) !== frontend.address.family);
      if (foreign.length > 0) throw invalid(`service ${svc.id}: backends ${foreign.join(', ')} are not IPv${frontend.address.family} like its frontend (a service is one family)`);
    }
    const size = this.opts.maglevTableSize;
    if (svc.maglevTable !== undefined) {
      if (svc.maglevTable.length !== size) throw invalid(`service ${svc.id}: a Maglev table of ${svc.maglevTable.length} entries, the datapath's size is ${size}`);
      const missing = svc.maglevTable.find((b) => b !== 0 && !this.#backends.has(b));
      if (missing !== undefined) throw new DatapathError('not-found', `service ${svc.id}: its Maglev table names backend ${missing}, which is not in the backend map`);
    }
    const ranges = new Map<string, IpPrefix>();
    for (const text of svc.sourceRanges ?? []) {
      let p: IpPrefix;
      try {
        p = parsePrefix(text);
      } catch {
        throw invalid(`service ${svc.id}: source range ${JSON.stringify(text)} is not a CIDR`);
      }
      if (p.family !== frontend.address.family) throw invalid(`service ${svc.id}: source range ${text} is not IPv${frontend.address.family} like its frontend`);
      ranges.set(formatPrefix(p), p);
    }
    const wanted = membersOf(svc);
    const absent = [...wanted].filter((b) => !this.#backends.has(b));
    if (absent.length > 0) throw new DatapathError('not-found', `service ${svc.id}: members ${absent.join(', ')} are not in the backend map (upsert them first)`);
    // The service subsystem keeps frontends unique among live services: another ID here is stale
    // (a previous run's, not restored): it goes, and this service takes the frontend over.
    for (const other of [...(this.#byFrontend.get(frontendText(frontend)) ?? [])]) {
      if (other !== svc.id) {
        this.opts.log.warn({ service: svc.id, stale: other, frontend: frontendText(frontend) }, 'frontend held by a service the agent no longer has: taking it over');
        await this.#deleteService(other);
      }
    }
    const flags = serviceFlags(svc);
    const routeAddress = routedFrontend(flags, frontend) ? formatIp(frontend.address) : undefined;
    const old = this.#services.get(svc.id);
    const moved = old !== undefined && !sameFrontend(old.frontend, frontend);
    const { maps } = this.opts;
    const undo = new UndoList();
    // The shadow says which keys the map can hold for this service: a slot past the old count (or of a new or moved
    // frontend) is absent, and its undo needs no lookup; 10,000 new services are 40,000 fewer syscalls.
    const mayHold = (k: Lb4Key) => old !== undefined && !moved && k.backendSlot <= (old.counts.get(k.scope) ?? -1);
    const set = (k: Lb4Key, v: Lb4ServiceValue) => {
      const previous = mayHold(k) ? maps.services.get(k) : undefined;
      maps.services.set(k, v);
      undo.add(() => (previous ? maps.services.set(k, previous) : void maps.services.delete(k)), 'service entry');
    };
    const counts = new Map<number, number>();
    const slots = new Map<number, readonly number[]>();
    // What tendril_lb4_member holds for the service as this goes on: the old members and the new, then the new only.
    const members = new Set(old?.members ?? []);
    try {
      // Members first: a connection pinned to a backend a new slot names is kept from the moment it is named.
      for (const b of wanted) {
        if (members.has(b)) continue;
        maps.members.set(memberKey(svc.id, b), 1);
        members.add(b);
        undo.add(() => {
          maps.members.delete(memberKey(svc.id, b));
          members.delete(b);
        }, `member ${b}`);
      }
      const previousRev = old !== undefined ? maps.revNat.get(svc.id) : undefined;
      maps.revNat.set(svc.id, { address: frontend.address, port: frontend.port });
      undo.add(() => (previousRev ? maps.revNat.set(svc.id, previousRev) : void maps.revNat.delete(svc.id)), 'reverse NAT entry');
      const writeScope = (scope: number, ids: readonly number[]) => {
        ids.forEach((backendId, i) => set(key(frontend, i + 1, scope), { backendId, affinityTimeout: 0, count: 0, revNatIndex: svc.id, flags: 0 }));
        set(key(frontend, 0, scope), { backendId: 0, affinityTimeout: svc.affinityTimeoutSec, count: ids.length, revNatIndex: svc.id, flags });
        counts.set(scope, ids.length);
        slots.set(scope, [...ids]);
      };
      // The table is in place before any slot 0 carries the MAGLEV flag; the internal scope is
      // complete before the external entry's TWO_SCOPES flag sends traffic to it.
      if (svc.maglevTable !== undefined) await this.#setMaglev(svc.id, svc.maglevTable, undo);
      const internal = scopes.get(LbScope.INTERNAL);
      if (internal) writeScope(LbScope.INTERNAL, internal);
      if (routeAddress !== undefined && old?.routeAddress !== routeAddress) {
        await this.opts.routes.hold(svc.id, routeAddress);
        undo.add(() => this.opts.routes.release(svc.id, routeAddress), 'frontend route');
      }
      // The ranges are in before slot 0 names SOURCE_RANGES (until then the old ones, or none, hold): never a moment that drops a source both allow.
      for (const [text, prefix] of ranges) {
        if (old?.ranges?.has(text)) continue;
        const k = { serviceId: svc.id, prefix };
        maps.sourceRanges.set(k, 1);
        undo.add(() => void maps.sourceRanges.delete(k), `source range ${text}`);
      }
      writeScope(LbScope.EXTERNAL, svc.backendIds);
    } catch (err) {
      await undo.rollBack(this.opts.log, UNDO_FAILED);
      throw wrap(`service ${svc.id} (${frontendText(frontend)}): writing the load-balancer maps`, err);
    }
    // In force; what the service no longer has goes now.
    try {
      if (old) {
        for (const [scope, oldCount] of old.counts) {
          const newCount = moved ? undefined : counts.get(scope);
          // A scope (or frontend) that is no more: its slot 0 first, so nothing finds the slots while they go.
          if (newCount === undefined) maps.services.delete(key(old.frontend, 0, scope));
          for (let slot = (newCount ?? 0) + 1; slot <= oldCount; slot++) maps.services.delete(key(old.frontend, slot, scope));
        }
        if (old.routeAddress !== undefined && old.routeAddress !== routeAddress) await this.opts.routes.release(svc.id, old.routeAddress);
      }
      for (const text of old?.ranges ?? []) if (!ranges.has(text)) maps.sourceRanges.delete({ serviceId: svc.id, prefix: parsePrefix(text) });
      if (svc.maglevTable === undefined && this.#maglev.has(svc.id)) {
        await maps.maglev.delete(svc.id);
        this.#maglev.delete(svc.id);
        this.#maglevBackends.delete(svc.id);
      }
      // Last, once no slot or table names them: the service's connections to these choose again on their next packet.
      for (const b of [...members]) {
        if (wanted.has(b)) continue;
        maps.members.delete(memberKey(svc.id, b));
        members.delete(b);
      }
    } catch (err) {
      throw wrap(`service ${svc.id}: removing entries it no longer has`, err);
    } finally {
      this.#setShadow(svc.id, { frontend, flags, counts, slots, members, ...(routeAddress !== undefined ? { routeAddress } : {}), ...(ranges.size > 0 ? { ranges: new Set(ranges.keys()) } : {}) });
    }
  }

  /** A fresh inner array holding the table, swapped in whole: programs see the old table or the new one. */
  async #setMaglev(id: number, table: Uint32Array, undo: UndoList): Promise<void> {
    const inner = await RawMap.create({ name: `tdl_mag_${id}`, type: 'ARRAY', keySize: 4, valueSize: 4, maxEntries: table.length, flags: BPF_F_INNER_MAP });
    try {
      const entries: Array<[Buffer, Buffer]> = [];
      for (let i = 0; i < table.length; i++) {
        const k = Buffer.alloc(4);
        k.writeUInt32LE(i);
        const v = Buffer.alloc(4);
        v.writeUInt32LE(table[i]!);
        entries.push([k, v]);
      }
      await inner.updateBatch(entries);
      const had = this.#maglev.has(id);
      await this.opts.maps.maglev.set(id, inner);
      this.#maglev.add(id);
      this.#maglevBackends.set(id, new Set(table.filter((b) => b !== 0)));
      // A replaced table cannot be put back (the old inner map is gone with its last reference): its backends exist, which is what matters.
      if (!had) {
        undo.add(async () => {
          await this.opts.maps.maglev.delete(id);
          this.#maglev.delete(id);
          this.#maglevBackends.delete(id);
        }, 'Maglev table');
      }
    } finally {
      inner.close();
    }
  }

  deleteService(id: number): Promise<void> {
    return this.#serial(() => this.#deleteService(id));
  }

  async #deleteService(id: number): Promise<void> {
    const s = this.#services.get(id);
    const { maps } = this.opts;
    try {
      if (s) {
        // The external entry first: from then on no packet finds the service.
        const scopes = [...s.counts.keys()].sort((a, b) => a - b);
        for (const scope of scopes) {
          maps.services.delete(key(s.frontend, 0, scope));
          for (let slot = 1; slot <= (s.counts.get(scope) ?? 0); slot++) maps.services.delete(key(s.frontend, slot, scope));
        }
        // Its own entries only: conntrack and affinity entries of the service are left to expire (no packet finds the service any more).
        for (const b of [...s.members]) {
          maps.members.delete(memberKey(id, b));
          s.members.delete(b);
        }
        for (const text of s.ranges ?? []) maps.sourceRanges.delete({ serviceId: id, prefix: parsePrefix(text) });
        this.#dropShadow(id);
        if (s.routeAddress !== undefined) await this.opts.routes.release(id, s.routeAddress);
      }
      if (this.#maglev.has(id)) {
        await maps.maglev.delete(id);
        this.#maglev.delete(id);
        this.#maglevBackends.delete(id);
      }
      maps.revNat.delete(id);
    } catch (err) {
      throw wrap(`deleting service ${id}`, err);
    }
  }

  restoreDone(liveServiceIds: readonly number[], liveBackendIds: readonly number[]): Promise<void> {
    return this.#serial(() => this.#restoreDone(liveServiceIds, liveBackendIds));
  }

  async #restoreDone(liveServiceIds: readonly number[], liveBackendIds: readonly number[]): Promise<void> {
    const liveSvc = new Set(liveServiceIds);
    const liveBe = new Set(liveBackendIds);
    const { maps } = this.opts;
    const staleServices = [...this.#services.keys()].filter((id) => !liveSvc.has(id));
    for (const id of staleServices) await this.#deleteService(id);
    // Entries no shadow knows (a slot beyond a count, a scope left behind): walk once.
    const strayKeys: Lb4Key[] = [];
    for await (const [k, v] of maps.services.entries()) {
      const s = this.#services.get(v.revNatIndex);
      const count = s?.counts.get(k.scope);
      if (!s || count === undefined || !sameFrontend(s.frontend, { address: k.address, port: k.dport, proto: k.proto }) || k.backendSlot > count) strayKeys.push(k);
    }
    const strayRev: number[] = [];
    for await (const id of maps.revNat.keys()) if (!liveSvc.has(id)) strayRev.push(id);
    const strayMaglev = [...this.#maglev].filter((id) => !liveSvc.has(id));
    const strayMembers: Lb4MemberKey[] = [];
    for await (const k of maps.members.keys()) if (this.#services.get(k.revNatIndex)?.members.has(k.backendId) !== true) strayMembers.push(k);
    const strayRanges: LbSourceRangeKey[] = [];
    for await (const k of maps.sourceRanges.keys()) if (this.#services.get(k.serviceId)?.ranges?.has(formatPrefix(k.prefix)) !== true) strayRanges.push(k);
    const staleBackends = [...this.#backends].filter((id) => !liveBe.has(id));
    try {
      // Slot 0 entries first: a service stops being found before its slots go.
      strayKeys.sort((a, b) => a.backendSlot - b.backendSlot);
      for (const k of strayKeys) maps.services.delete(k);
      for (const id of strayRev) maps.revNat.delete(id);
      for (const k of strayMembers) maps.members.delete(k);
      for (const k of strayRanges) maps.sourceRanges.delete(k);
      for (const id of strayMaglev) {
        await maps.maglev.delete(id);
        this.#maglev.delete(id);
        this.#maglevBackends.delete(id);
      }
    } catch (err) {
      throw wrap('removing service entries the agent no longer has', err);
    }
    const inSlots = this.#slottedBackends(new Set(staleBackends));
    const slotted = new Set(inSlots.map(([b]) => b));
    if (slotted.size > 0) this.opts.log.warn({ backends: [...slotted] }, 'backends the agent did not restore are still in service slots: kept');
    const doomed = staleBackends.filter((b) => !slotted.has(b));
    if (doomed.length > 0) await this.#deleteBackends(doomed);
    const routes = await this.opts.routes.prune();
    if (staleServices.length + strayKeys.length + strayMembers.length + doomed.length + strayMaglev.length + routes.length > 0) {
      this.opts.log.info({ services: staleServices, strayEntries: strayKeys.length, strayMembers: strayMembers.length, backends: doomed, maglev: strayMaglev, routes }, 'removed load-balancer state the agent no longer has');
    }
  }
}
