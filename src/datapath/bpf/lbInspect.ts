/**
 * The load-balancer and NAT maps decoded for people: `tendril bpf lb list`
 * (services grouped by frontend with each slot's backend, backends, reverse
 * NAT, affinity) and `tendril bpf nat list` (SNAT mappings, node devices).
 * Works from the pins alone, like inspect.ts, and writes nothing.
 */
import { formatIp } from '../../netip/index.js';
import { isKernelError } from '../kernel/errors.js';
import { codec, MapOfMaps } from '../kernel/bpf/index.js';
import { BackendState, DeviceFlag, LbScope, MapName, type MapNameValue, NatDirection, NatFlag, ServiceFlag } from './constants.js';
import { type DatapathInspector, DatapathInspectError } from './inspect.js';
import { deviceInfo, lb4AffinityKey, lb4AffinityValue, lb4Backend, lb4Key, lb4ReverseNat, lb4Service, lb6AffinityKey, lb6Backend, lb6Key, lb6ReverseNat, nat4Entry, nat4Key, nat6Entry, nat6Key } from './layout.js';
import type { Codec } from '../kernel/bpf/index.js';
import type { IpAddress } from '../../netip/index.js';

const PROTOCOL_NAMES: Record<number, string> = { 1: 'ICMP', 6: 'TCP', 17: 'UDP', 132: 'SCTP' };
const STATE_NAMES: Record<number, string> = {
  [BackendState.ACTIVE]: 'active',
  [BackendState.TERMINATING]: 'terminating',
  [BackendState.QUARANTINED]: 'quarantined',
  [BackendState.MAINTENANCE]: 'maintenance',
};

export function protocolName(proto: number): string {
  return PROTOCOL_NAMES[proto] ?? String(proto);
}

function flagNames(flags: number, table: Record<string, number>): string[] {
  return Object.entries(table)
    .filter(([, bit]) => (flags & bit) !== 0)
    .map(([name]) => name.toLowerCase().replace(/_/g, '-'));
}

export interface LbSlotRow {
  slot: number;
  backendId: number;
  /** `address:port` of the backend; absent when the backend map has no such ID. */
  backend?: string;
  state?: string;
}

export interface LbServiceRow {
  /** The service ID (= its reverse NAT index). */
  id: number;
  /** `address:port/PROTO`; address 0.0.0.0 = every node IPv4 address (NodePort; one on :: is one entry per node IPv6 address). */
  frontend: string;
  address: string;
  port: number;
  protocol: string;
  scope: 'external' | 'internal';
  /** ServiceFlag names: nodeport, external-ip, loadbalancer, local-traffic, affinity, maglev, two-scopes. */
  flags: string[];
  affinityTimeoutSec: number;
  /** Slot 0's count: backends new connections may go to. */
  count: number;
  slots: LbSlotRow[];
  /** A Maglev table is installed for the service. */
  maglevTable: boolean;
}

export interface LbBackendRow {
  id: number;
  address: string;
  port: number;
  protocol: string;
  state: string;
}

export interface LbReverseNatRow {
  id: number;
  address: string;
  port: number;
}

export interface LbAffinityRow {
  client: string;
  serviceId: number;
  backendId: number;
  /** Seconds since the client last used the entry. */
  idleSeconds: number;
}

export interface NatMappingRow {
  /** egress: the original tuple → its new source; ingress: the reply's tuple → the original source. */
  direction: 'egress' | 'ingress';
  protocol: string;
  saddr: string;
  sport: number;
  daddr: string;
  dport: number;
  toAddr: string;
  toPort: number;
  /** NatFlag names: masquerade, nodeport. */
  flags: string[];
  ageSeconds: number;
}

export interface NodeDeviceRow {
  ifindex: number;
  ipv4: string;
  mac: string;
  masquerade: boolean;
  /** The IPv6 SNAT source on the device; absent when it has no global IPv6 address. */
  ipv6?: string;
}

export interface LbListing {
  services: LbServiceRow[];
  backends: LbBackendRow[];
  reverseNat: LbReverseNatRow[];
  affinity: LbAffinityRow[];
}

export interface NatListing {
  mappings: NatMappingRow[];
  devices: NodeDeviceRow[];
}

const secondsSince = (ns: bigint, nowNs: bigint) => Number((nowNs - ns) / 1_000_000n) / 1000;

/** `address:port`, an IPv6 address in brackets. */
function hostPort(address: IpAddress, port: number): string {
  return address.family === 6 ? `[${formatIp(address)}]:${port}` : `${formatIp(address)}:${port}`;
}

/** A map of each family: IPv4's, then IPv6's (the lb6 maps, next to lb4's in every object). */
interface FamilyMaps<K, V> {
  v4: [MapNameValue, Codec<K>, Codec<V>];
  v6: [MapNameValue, Codec<K>, Codec<V>];
}

export class LbInspector {
  constructor(readonly inspector: DatapathInspector) {}

  /** Every entry of both families' maps. */
  async #entries<K, V>(maps: FamilyMaps<K, V>): Promise<Array<[K, V]>> {
    const out: Array<[K, V]> = [];
    for (const [name, key, value] of [maps.v4, maps.v6]) {
      await this.inspector.withMap(name, key, value, async (m) => {
        for await (const e of m.entries()) out.push(e);
      });
    }
    return out;
  }

  async backends(): Promise<LbBackendRow[]> {
    const rows: LbBackendRow[] = [];
    for (const [id, v] of await this.#entries({ v4: [MapName.LB_BACKENDS, codec.u32, lb4Backend], v6: [MapName.LB6_BACKENDS, codec.u32, lb6Backend] })) {
      rows.push({ id, address: formatIp(v.address), port: v.port, protocol: protocolName(v.proto), state: STATE_NAMES[v.state] ?? `unknown-${v.state}` });
    }
    return rows.sort((a, b) => a.id - b.id);
  }

  /** Service IDs with a Maglev table. */
  async #maglevIds(): Promise<Set<number>> {
    let m: MapOfMaps<number>;
    try {
      m = MapOfMaps.openPinned(this.inspector.pinPath(MapName.LB_MAGLEV), codec.u32);
    } catch (err) {
      if (isKernelError(err, 'ENOENT')) throw new DatapathInspectError('NOT_LOADED', `the eBPF datapath's map ${MapName.LB_MAGLEV} is not pinned at ${this.inspector.pinPath(MapName.LB_MAGLEV)}`, { cause: err });
      throw err;
    }
    try {
      const ids = new Set<number>();
      for await (const id of m.keys()) ids.add(id);
      return ids;
    } finally {
      m.close();
    }
  }

  /** Services by frontend and scope, each with its slots resolved to backends. */
  async services(backends?: readonly LbBackendRow[]): Promise<LbServiceRow[]> {
    const byId = new Map((backends ?? (await this.backends())).map((b) => [b.id, b]));
    const maglev = await this.#maglevIds();
    const entries = await this.#entries({ v4: [MapName.LB_SERVICES, lb4Key, lb4Service], v6: [MapName.LB6_SERVICES, lb6Key, lb4Service] });
    const groups = new Map<string, LbServiceRow>();
    const slots: Array<[string, number, number]> = [];
    for (const [k, v] of entries) {
      const address = formatIp(k.address);
      const protocol = protocolName(k.proto);
      const group = `${hostPort(k.address, k.dport)}/${protocol}/${k.scope}`;
      if (k.backendSlot === 0) {
        groups.set(group, {
          id: v.revNatIndex,
          frontend: `${hostPort(k.address, k.dport)}/${protocol}`,
          address,
          port: k.dport,
          protocol,
          scope: k.scope === LbScope.INTERNAL ? 'internal' : 'external',
          flags: flagNames(v.flags, ServiceFlag),
          affinityTimeoutSec: v.affinityTimeout,
          count: v.count,
          slots: [],
          maglevTable: maglev.has(v.revNatIndex),
        });
      } else {
        slots.push([group, k.backendSlot, v.backendId]);
      }
    }
    for (const [group, slot, backendId] of slots) {
      const row = groups.get(group);
      // A slot whose service entry is gone (being written or removed): nothing to show it under.
      if (!row) continue;
      const b = byId.get(backendId);
      row.slots.push({ slot, backendId, ...(b ? { backend: b.address.includes(':') ? `[${b.address}]:${b.port}` : `${b.address}:${b.port}`, state: b.state } : {}) });
    }
    const rows = [...groups.values()];
    for (const r of rows) r.slots.sort((a, b) => a.slot - b.slot);
    return rows.sort((a, b) => a.id - b.id || a.scope.localeCompare(b.scope));
  }

  async reverseNat(): Promise<LbReverseNatRow[]> {
    const rows: LbReverseNatRow[] = [];
    for (const [id, v] of await this.#entries({ v4: [MapName.LB_REVNAT, codec.u16, lb4ReverseNat], v6: [MapName.LB6_REVNAT, codec.u16, lb6ReverseNat] })) {
      rows.push({ id, address: formatIp(v.address), port: v.port });
    }
    return rows.sort((a, b) => a.id - b.id);
  }

  async affinity(nowNs: bigint = process.hrtime.bigint()): Promise<LbAffinityRow[]> {
    const rows: LbAffinityRow[] = [];
    for (const [k, v] of await this.#entries({ v4: [MapName.LB_AFFINITY, lb4AffinityKey, lb4AffinityValue], v6: [MapName.LB6_AFFINITY, lb6AffinityKey, lb4AffinityValue] })) {
      rows.push({ client: formatIp(k.client), serviceId: k.revNatIndex, backendId: v.backendId, idleSeconds: secondsSince(v.lastUsedNs, nowNs) });
    }
    return rows.sort((a, b) => a.serviceId - b.serviceId || a.client.localeCompare(b.client, 'en', { numeric: true }));
  }

  /** Everything `tendril bpf lb list` shows. */
  async lbList(): Promise<LbListing> {
    const backends = await this.backends();
    return { services: await this.services(backends), backends, reverseNat: await this.reverseNat(), affinity: await this.affinity() };
  }

  /** Both families' mappings (tendril_snat4, tendril_snat6), IPv4 first. */
  async natMappings(nowNs: bigint = process.hrtime.bigint()): Promise<NatMappingRow[]> {
    const rows: NatMappingRow[] = [];
    for (const [k, v] of await this.#entries({ v4: [MapName.SNAT, nat4Key, nat4Entry], v6: [MapName.SNAT6, nat6Key, nat6Entry] })) {
      rows.push({
        direction: k.dir === NatDirection.INGRESS ? 'ingress' : 'egress',
        protocol: protocolName(k.proto),
        saddr: formatIp(k.saddr),
        sport: k.sport,
        daddr: formatIp(k.daddr),
        dport: k.dport,
        toAddr: formatIp(v.toAddr),
        toPort: v.toPort,
        flags: flagNames(v.flags, NatFlag),
        ageSeconds: secondsSince(v.createdNs, nowNs),
      });
    }
    const family = (r: NatMappingRow) => (r.saddr.includes(':') ? 6 : 4);
    return rows.sort((a, b) => a.direction.localeCompare(b.direction) || family(a) - family(b) || a.saddr.localeCompare(b.saddr, 'en', { numeric: true }) || a.sport - b.sport);
  }

  async devices(): Promise<NodeDeviceRow[]> {
    return this.inspector.withMap(MapName.DEVICES, codec.u32, deviceInfo, async (m) => {
      const rows: NodeDeviceRow[] = [];
      for await (const [ifindex, v] of m.entries()) {
        rows.push({ ifindex, ipv4: formatIp(v.ipv4), mac: v.mac, masquerade: (v.flags & DeviceFlag.MASQUERADE) !== 0, ...(v.ipv6 !== undefined ? { ipv6: formatIp(v.ipv6) } : {}) });
      }
      return rows.sort((a, b) => a.ifindex - b.ifindex);
    });
  }

  /** Everything `tendril bpf nat list` shows. */
  async natList(nowNs?: bigint): Promise<NatListing> {
    return { mappings: await this.natMappings(nowNs), devices: await this.devices() };
  }
}
