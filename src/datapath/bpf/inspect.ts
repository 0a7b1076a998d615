/**
 * Reads the datapath's pinned maps and decodes them for people: what
 * `tendril bpf …` and the agent's /v1/bpf routes show. It works from the pins
 * alone (`<bpffs root>/tendril/<map name>`), so it sees exactly what the
 * programs see, whoever loaded them. Each call opens the maps it reads and
 * closes them again: a map replaced under the pin (an upgrade that changed a
 * map's shape) is read as it is now, never through a stale fd.
 *
 * Apart from flushConntrack, nothing here writes to a map.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { CodedError } from '../../errors/codedError.js';
import { formatIp, formatPrefix, type IpAddress, type IpPrefix } from '../../netip/index.js';
import { isKernelError } from '../kernel/errors.js';
import { BpfMap, type Codec, perCpuValue } from '../kernel/bpf/index.js';
import { CtFlag, CtKeyFlag, dropReasonName, EndpointFlag, MapName, type MapNameValue, MetricsReason, TrafficDirection } from './constants.js';
import {
  type Ct4Key,
  ct4Key,
  type Ct6Key,
  ct6Key,
  ctEntry,
  type CtEntryValue,
  endpointInfo,
  endpointKey,
  type EndpointInfoValue,
  ipcacheKey,
  ipcacheValue,
  type IpcacheValue,
  metricsKey,
  metricsValue,
  type PolicyEntryValue,
  policyEntry,
  type PolicyKey,
  policyKey,
} from './layout.js';

/** The directory the datapath pins its maps in. */
export function datapathPinDir(bpffsRoot: string): string {
  return join(bpffsRoot, 'tendril');
}

export type DatapathInspectErrorCode = 'NOT_LOADED';

/** The datapath's maps are not pinned where they should be (no eBPF datapath on this node, or a wrong bpffs root). */
export class DatapathInspectError extends CodedError<DatapathInspectErrorCode> {}

/** A conntrack table: TCP flows or every other protocol. */
export type CtTable = 'tcp' | 'any';
const CT_MAPS: Record<CtTable, MapNameValue> = { tcp: MapName.CT_TCP, any: MapName.CT_ANY };
/** The IPv6 maps of each table (absent on a datapath from before IPv6 conntrack: nothing to list there). */
const CT6_MAPS: Record<CtTable, MapNameValue> = { tcp: MapName.CT6_TCP, any: MapName.CT6_ANY };

export interface EndpointMapRow {
  ip: string;
  endpointId: number;
  identity: number;
  ifindex: number;
  lxcMac: string;
  podMac: string;
  flags: number;
  /** The entry is one of the node's own addresses, not a pod. */
  host: boolean;
}

export interface IpcacheMapRow {
  prefix: string;
  identity: number;
  /** Node to tunnel to; absent when none. */
  tunnelEndpoint?: string;
  flags: number;
}

export interface PolicyMapRow {
  endpointId: number;
  direction: 'ingress' | 'egress';
  /** Peer identity; 0 = any peer. */
  identity: number;
  /** IANA protocol; 0 = any. */
  proto: number;
  /** First and last port the entry covers (0-65535 for every port). */
  portFirst: number;
  portLast: number;
  portPrefixLen: number;
  deny: boolean;
  cookie: number;
  l4PrefixBits: number;
  /** An entry of the endpoint's staged view (reported, never enforced); absent for the enforced policy's. */
  staged?: true;
}

export interface CtRow {
  table: CtTable;
  saddr: string;
  daddr: string;
  sport: number;
  dport: number;
  proto: number;
  /** Seconds left before the entry expires (negative: expired, waiting for GC). */
  expiresInSeconds: number;
  packets: number;
  bytes: number;
  srcIdentity: number;
  dstIdentity: number;
  srcEndpoint: number;
  dstEndpoint: number;
  tcpFlags: number;
  replySeen: boolean;
  closing: boolean;
  /** Reset, or a FIN seen both ways: the tuple, and the SNAT port it holds, may be taken by a new connection. */
  closed: boolean;
  /** Counted against its endpoint's conntrack budget. */
  charged: boolean;
  /** A service flow's load-balancing state; absent for flows no service translated. */
  service?: CtServiceInfo;
}

export interface CtServiceInfo {
  /** The entry is the service entry (keyed by the client's tuple to the frontend), not the translated flow's. */
  serviceEntry: boolean;
  /** The service ID (reverse NAT index); 0 = none. */
  revNatIndex: number;
  /** The backend the connection is pinned to; 0 = none. */
  backendId: number;
  /** The frontend as the client addressed it (`address:port`): replies' source. */
  frontend: string;
  hairpin: boolean;
  nodePort: boolean;
}

export interface MetricsRow {
  /** 0 = forwarded, else the drop code's absolute value. */
  reason: number;
  /** 'FORWARDED', a DropReason name, or 'UNKNOWN_<n>'. */
  reasonName: string;
  direction: 'ingress' | 'egress' | 'none';
  packets: number;
  bytes: number;
}

export function directionName(d: number): 'ingress' | 'egress' | 'none' {
  return d === TrafficDirection.INGRESS ? 'ingress' : d === TrafficDirection.EGRESS ? 'egress' : 'none';
}

export function metricsReasonName(reason: number): string {
  if (reason === MetricsReason.FORWARDED) return 'FORWARDED';
  if (reason === MetricsReason.EVENTS_LOST) return 'EVENTS_LOST';
  return dropReasonName(reason) ?? `UNKNOWN_${reason}`;
}

export function endpointRow(ip: IpAddress, v: EndpointInfoValue): EndpointMapRow {
  return { ip: formatIp(ip), endpointId: v.endpointId, identity: v.identity, ifindex: v.ifindex, lxcMac: v.lxcMac, podMac: v.podMac, flags: v.flags, host: (v.flags & EndpointFlag.HOST) !== 0 };
}

export function ipcacheRow(p: IpPrefix, v: IpcacheValue): IpcacheMapRow {
  const tunnel = v.tunnelIp4 !== 0 ? [v.tunnelIp4 >>> 24, (v.tunnelIp4 >>> 16) & 0xff, (v.tunnelIp4 >>> 8) & 0xff, v.tunnelIp4 & 0xff].join('.') : v.tunnelIp6 !== undefined ? formatIp(v.tunnelIp6) : undefined;
  return { prefix: formatPrefix(p), identity: v.identity, ...(tunnel ? { tunnelEndpoint: tunnel } : {}), flags: v.flags };
}

export function policyRow(k: PolicyKey, v: PolicyEntryValue): PolicyMapRow {
  const span = k.proto === 0 ? 0xffff : 0xffff >>> k.portPrefixLen;
  const first = k.proto === 0 ? 0 : k.port & ~span & 0xffff;
  return {
    endpointId: k.endpointId,
    direction: k.egress ? 'egress' : 'ingress',
    identity: k.identity,
    proto: k.proto,
    portFirst: first,
    portLast: first + span,
    portPrefixLen: k.portPrefixLen,
    deny: v.deny !== 0,
    cookie: v.cookie,
    l4PrefixBits: v.l4PrefixBits,
    ...(k.staged === true ? { staged: true as const } : {}),
  };
}

const TCP_FLAG_RST = 0x04;
const CT_FIN_BOTH_WAYS = CtFlag.FIN_ORIGINAL | CtFlag.FIN_REPLY;

export function ctRow(table: CtTable, k: Ct4Key | Ct6Key, v: CtEntryValue, nowNs: bigint): CtRow {
  const service = ctServiceInfo(k, v);
  return {
    table,
    saddr: formatIp(k.saddr),
    daddr: formatIp(k.daddr),
    sport: k.sport,
    dport: k.dport,
    proto: k.proto,
    expiresInSeconds: Number((v.expiresNs - nowNs) / 1_000_000n) / 1000,
    packets: Number(v.packets),
    bytes: Number(v.bytes),
    srcIdentity: v.srcIdentity,
    dstIdentity: v.dstIdentity,
    srcEndpoint: v.srcEndpoint,
    dstEndpoint: v.dstEndpoint,
    tcpFlags: v.tcpFlags,
    replySeen: (v.flags & CtFlag.REPLY_SEEN) !== 0,
    closing: (v.flags & CtFlag.CLOSING) !== 0,
    closed: (v.tcpFlags & TCP_FLAG_RST) !== 0 || (v.flags & CT_FIN_BOTH_WAYS) === CT_FIN_BOTH_WAYS,
    charged: (v.flags & CtFlag.CHARGED) !== 0,
    ...(service ? { service } : {}),
  };
}

/** A service flow's load-balancing state, undefined for flows no service translated. */
export function ctServiceInfo(k: Pick<Ct4Key, 'flags'>, v: CtEntryValue): CtServiceInfo | undefined {
  if ((k.flags & CtKeyFlag.SERVICE) === 0 && v.revNatIndex === 0 && v.backendId === 0) return undefined;
  return {
    serviceEntry: (k.flags & CtKeyFlag.SERVICE) !== 0,
    revNatIndex: v.revNatIndex,
    backendId: v.backendId,
    frontend: `${formatIp(v.natAddr)}:${v.natPort}`,
    hairpin: (v.flags & CtFlag.HAIRPIN) !== 0,
    nodePort: (v.flags & CtFlag.NODEPORT) !== 0,
  };
}

/** The eBPF datapath's maps as pinned under one directory. */
export class DatapathInspector {
  constructor(readonly pinDir: string) {}

  static forBpffsRoot(bpffsRoot: string): DatapathInspector {
    return new DatapathInspector(datapathPinDir(bpffsRoot));
  }

  pinPath(name: MapNameValue): string {
    return join(this.pinDir, name);
  }

  /** Whether the datapath's maps are pinned here at all. */
  loaded(): boolean {
    return existsSync(this.pinPath(MapName.ENDPOINTS));
  }

  /** Opens one pinned map for the duration of `use`. */
  async withMap<K, V, R>(name: MapNameValue, key: Codec<K>, value: Codec<V>, use: (map: BpfMap<K, V>) => Promise<R>): Promise<R> {
    let map: BpfMap<K, V>;
    try {
      map = BpfMap.openPinned(this.pinPath(name), key, value);
    } catch (err) {
      if (isKernelError(err, 'ENOENT')) {
        throw new DatapathInspectError('NOT_LOADED', `the eBPF datapath's map ${name} is not pinned at ${this.pinPath(name)}: is the agent running with the eBPF datapath?`, { cause: err });
      }
      throw err;
    }
    try {
      return await use(map);
    } finally {
      map.close();
    }
  }

  async endpoints(): Promise<EndpointMapRow[]> {
    return this.withMap(MapName.ENDPOINTS, endpointKey, endpointInfo, async (m) => {
      const rows: EndpointMapRow[] = [];
      for await (const [ip, v] of m.entries()) rows.push(endpointRow(ip, v));
      return rows.sort((a, b) => a.endpointId - b.endpointId || a.ip.localeCompare(b.ip));
    });
  }

  async ipcache(): Promise<IpcacheMapRow[]> {
    return this.withMap(MapName.IPCACHE, ipcacheKey, ipcacheValue, async (m) => {
      const rows: IpcacheMapRow[] = [];
      for await (const [p, v] of m.entries()) rows.push(ipcacheRow(p, v));
      return rows.sort((a, b) => a.prefix.localeCompare(b.prefix, 'en', { numeric: true }));
    });
  }

  /** Policy entries, of one endpoint or of all. The trie is walked whole: it is one map for every endpoint. */
  async policy(endpointId?: number): Promise<PolicyMapRow[]> {
    return this.withMap(MapName.POLICY, policyKey, policyEntry, async (m) => {
      const rows: PolicyMapRow[] = [];
      for await (const [k, v] of m.entries()) if (endpointId === undefined || k.endpointId === endpointId) rows.push(policyRow(k, v));
      return rows.sort(
        (a, b) =>
          a.endpointId - b.endpointId || a.direction.localeCompare(b.direction) || a.identity - b.identity || a.proto - b.proto || a.portFirst - b.portFirst || a.portLast - b.portLast,
      );
    });
  }

  /** Conntrack entries of both tables, IPv4 then IPv6; with an endpoint, the flows it opened or that were opened to it. */
  async conntrack(filter: { endpoint?: number } = {}, nowNs: bigint = process.hrtime.bigint()): Promise<CtRow[]> {
    const rows: CtRow[] = [];
    const keep = (v: CtEntryValue) => filter.endpoint === undefined || v.srcEndpoint === filter.endpoint || v.dstEndpoint === filter.endpoint;
    for (const table of ['tcp', 'any'] as const) {
      await this.withMap(CT_MAPS[table], ct4Key, ctEntry, async (m) => {
        for await (const [k, v] of m.entries()) if (keep(v)) rows.push(ctRow(table, k, v, nowNs));
      });
    }
    for (const table of ['tcp', 'any'] as const) {
      if (!existsSync(this.pinPath(CT6_MAPS[table]))) continue;
      await this.withMap(CT6_MAPS[table], ct6Key, ctEntry, async (m) => {
        for await (const [k, v] of m.entries()) if (keep(v)) rows.push(ctRow(table, k, v, nowNs));
      });
    }
    return rows;
  }

  /**
   * Deletes every conntrack entry. Established flows then take the policy
   * path again on their next packet (as a new flow would), so a flow policy
   * no longer allows is cut.
   */
  async flushConntrack(): Promise<Record<CtTable, number>> {
    const out: Record<CtTable, number> = { tcp: 0, any: 0 };
    const maps = [...(['tcp', 'any'] as const).map((t) => [t, CT_MAPS[t]] as const), ...(['tcp', 'any'] as const).map((t) => [t, CT6_MAPS[t]] as const)];
    for (const [table, name] of maps) {
      if (name !== CT_MAPS[table] && !existsSync(this.pinPath(name))) continue;
      // Only the raw keys are used: the key codec of either family's map will do (the raw codec is the map's size).
      out[table] += await this.withMap(name, name === CT_MAPS[table] ? ct4Key : (ct6Key as unknown as typeof ct4Key), ctEntry, async (m) => {
        // Keys first, deletes after: deleting during a hash walk restarts it.
        const keys = [];
        for await (const k of m.raw.keys()) keys.push(Buffer.from(k));
        let n = 0;
        for (const k of keys) if (m.raw.delete(k)) n++;
        return n;
      });
    }
    return out;
  }

  /** The per-CPU counters summed over CPUs, by reason and direction. */
  async metrics(): Promise<MetricsRow[]> {
    return this.withMap(MapName.METRICS, metricsKey, perCpuValue(metricsValue), async (m) => {
      const rows: MetricsRow[] = [];
      for await (const [k, perCpu] of m.entries()) {
        let packets = 0n;
        let bytes = 0n;
        for (const c of perCpu) {
          packets += c.packets;
          bytes += c.bytes;
        }
        rows.push({ reason: k.reason, reasonName: metricsReasonName(k.reason), direction: directionName(k.direction), packets: Number(packets), bytes: Number(bytes) });
      }
      return rows.sort((a, b) => a.reason - b.reason || a.direction.localeCompare(b.direction));
    });
  }
}
