/**
 * One datapath object (build/bpf/bpf_lxc.o or bpf_host.o) loaded for a
 * BPF_PROG_TEST_RUN test: nothing pinned, so every load has fresh maps of
 * its own, small enough to create quickly; typed access to each map through
 * the codecs of layout.ts; the ring buffer read by a RingBufferReader and
 * decoded with `datapathEvent`.
 */
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { formatIp, parseIp, parsePrefix, type IpAddress } from '../../../netip/index.js';
import { BpfObject, type BpfMap, codec, perCpuValue, RingBufferReader, type TestRunResult } from '../../kernel/bpf/index.js';
import { MapName, POLICY_KEY_FIXED_BITS } from '../constants.js';
import type { MapSizes } from '../objects.js';
import {
  ct4Key,
  ct6Key,
  ctEntry,
  datapathConfig,
  datapathEvent,
  endpointInfo,
  endpointKey,
  frag4Key,
  frag4Ports,
  ipcacheKey,
  ipcacheValue,
  metricsKey,
  metricsValue,
  policyEntry,
  policyKey,
  type CtEntryValue,
  type DatapathEvent,
  type EndpointInfoValue,
  NO_NAT_CONFIG,
} from '../layout.js';

const BUILD = fileURLToPath(new URL('../../../../../build/bpf/', import.meta.url));
export const LXC_OBJECT = join(BUILD, 'bpf_lxc.o');
export const HOST_OBJECT = join(BUILD, 'bpf_host.o');
export const NETDEV_OBJECT = join(BUILD, 'bpf_netdev.o');
export const OVERLAY_OBJECT = join(BUILD, 'bpf_overlay.o');

/** Map sizes for tests (every datapath map): the defaults preallocate hundreds of MiB of conntrack. */
export const TEST_MAP_SIZES: Readonly<MapSizes> = {
  [MapName.ENDPOINTS]: 256,
  [MapName.IPCACHE]: 256,
  [MapName.POLICY]: 1024,
  [MapName.CT_TCP]: 1024,
  [MapName.CT_ANY]: 1024,
  [MapName.FRAG]: 256,
  [MapName.CT6_TCP]: 1024,
  [MapName.CT6_ANY]: 1024,
  [MapName.FRAG6]: 256,
  [MapName.METRICS]: 256,
  [MapName.EVENTS]: 1 << 16,
  [MapName.LB_SERVICES]: 1024,
  [MapName.LB_BACKENDS]: 256,
  [MapName.LB_REVNAT]: 256,
  [MapName.LB_AFFINITY]: 256,
  [MapName.LB_MAGLEV]: 16,
  [MapName.LB_MEMBERS]: 1024,
  [MapName.LB_SOURCE_RANGES]: 256,
  [MapName.LB6_SERVICES]: 1024,
  [MapName.LB6_BACKENDS]: 256,
  [MapName.LB6_REVNAT]: 256,
  [MapName.LB6_AFFINITY]: 256,
  [MapName.SNAT]: 8192,
  [MapName.SNAT6]: 8192,
  [MapName.DEVICES]: 16,
  [MapName.NO_MASQUERADE]: 64,
};

export interface TestEndpoint {
  ip: string;
  ifindex: number;
  identity: number;
  endpointId: number;
  flags?: number;
  lxcMac: string;
  podMac: string;
}

export interface TestPolicyEntry {
  endpointId: number;
  /** Peer identity; 0 = any. */
  identity: number;
  egress: boolean;
  /** 0 = any protocol. */
  proto?: number;
  port?: number;
  portPrefixLen?: number;
  cookie: number;
  deny?: boolean;
  /** An entry of the endpoint's staged view (the endpoint needs EndpointFlag.STAGED for it to be looked up). */
  staged?: boolean;
}

export interface CtTuple {
  saddr: string;
  daddr: string;
  sport: number;
  dport: number;
  proto: number;
}

export interface MetricCount {
  packets: bigint;
  bytes: bigint;
}

/** How long the reader has to deliver records before a test concludes there are no more. */
const EVENT_SETTLE_MS = 40;

export class ProgramHarness {
  readonly endpoints: BpfMap<IpAddress, EndpointInfoValue>;
  readonly ipcache: BpfMap<ReturnType<typeof ipcacheKey.read>, ReturnType<typeof ipcacheValue.read>>;
  readonly policy: BpfMap<ReturnType<typeof policyKey.read>, ReturnType<typeof policyEntry.read>>;
  readonly ctTcp: BpfMap<ReturnType<typeof ct4Key.read>, CtEntryValue>;
  readonly ctAny: BpfMap<ReturnType<typeof ct4Key.read>, CtEntryValue>;
  readonly ct6Tcp: BpfMap<ReturnType<typeof ct6Key.read>, CtEntryValue>;
  readonly ct6Any: BpfMap<ReturnType<typeof ct6Key.read>, CtEntryValue>;
  readonly frag: BpfMap<ReturnType<typeof frag4Key.read>, ReturnType<typeof frag4Ports.read>>;
  readonly metrics: BpfMap<ReturnType<typeof metricsKey.read>, Array<ReturnType<typeof metricsValue.read>>>;
  readonly config: BpfMap<number, ReturnType<typeof datapathConfig.read>>;
  readonly #events: DatapathEvent[] = [];
  readonly #reader: RingBufferReader;
  #readerError: unknown;

  private constructor(readonly object: BpfObject) {
    this.endpoints = object.map(MapName.ENDPOINTS, endpointKey, endpointInfo);
    this.ipcache = object.map(MapName.IPCACHE, ipcacheKey, ipcacheValue);
    this.policy = object.map(MapName.POLICY, policyKey, policyEntry);
    this.ctTcp = object.map(MapName.CT_TCP, ct4Key, ctEntry);
    this.ctAny = object.map(MapName.CT_ANY, ct4Key, ctEntry);
    this.ct6Tcp = object.map(MapName.CT6_TCP, ct6Key, ctEntry);
    this.ct6Any = object.map(MapName.CT6_ANY, ct6Key, ctEntry);
    this.frag = object.map(MapName.FRAG, frag4Key, frag4Ports);
    this.metrics = object.map(MapName.METRICS, metricsKey, perCpuValue(metricsValue));
    this.config = object.map(MapName.CONFIG, codec.u32, datapathConfig);
    this.#reader = RingBufferReader.open(
      object.rawMap(MapName.EVENTS),
      (records) => {
        for (const r of records) this.#events.push(datapathEvent.read(r, 0));
      },
      {
        onError: (err) => {
          this.#readerError = err;
        },
      },
    );
  }

  /** Loads `path` with fresh, unpinned maps (sizes overridable by map name) and starts reading its events. */
  static async load(path: string, sizes: Readonly<Record<string, number>> = {}): Promise<ProgramHarness> {
    const object = await BpfObject.load(path, { maxEntries: { ...TEST_MAP_SIZES, ...sizes } });
    try {
      return new ProgramHarness(object);
    } catch (err) {
      object.close();
      throw err;
    }
  }

  /** Runs `program` on `frame` (skb->ifindex is the loopback device's, 1), `repeat` times in one kernel call. */
  async run(program: string, frame: Uint8Array, repeat = 1): Promise<TestRunResult> {
    return this.object.program(program).testRun({ data: frame, ...(repeat > 1 ? { repeat } : {}) });
  }

  /**
   * Runs `program` on `frame` as a packet the node forwards: it arrived on
   * device `ingressIfindex` (skb->ingress_ifindex; `run` leaves it 0, a
   * packet the node itself sent).
   */
  async runForwarded(program: string, frame: Uint8Array, ingressIfindex: number): Promise<TestRunResult> {
    return this.object.program(program).testRun({ data: frame, ctx: skbContext({ ingressIfindex }) });
  }

  setTraceLevel(level: number): void {
    this.setConfig(level, 0);
  }

  /** The config entry with these ConfigFlag bits (and trace level). */
  setConfig(traceLevel: number, flags: number): void {
    this.config.set(0, { traceLevel, flags, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: 0, nodeIpv4: 0, ...NO_NAT_CONFIG });
  }

  addEndpoint(ep: TestEndpoint): void {
    this.endpoints.set(parseIp(ep.ip), {
      ifindex: ep.ifindex,
      identity: ep.identity,
      endpointId: ep.endpointId,
      flags: ep.flags ?? 0,
      lxcMac: ep.lxcMac,
      podMac: ep.podMac,
    });
  }

  /** An ipcache prefix (`10.0.0.0/8`, or an address for a /32). */
  addIpcache(prefix: string, identity: number): void {
    this.ipcache.set(parsePrefix(prefix.includes('/') ? prefix : `${prefix}/32`), { identity, tunnelIp4: 0, flags: 0 });
  }

  /** A policy entry as the datapath control plane writes it (l4PrefixBits = 8 + port prefix with a protocol, else 0). */
  addPolicy(e: TestPolicyEntry): void {
    const proto = e.proto ?? 0;
    const portPrefixLen = proto === 0 ? 0 : (e.portPrefixLen ?? (e.port === undefined ? 0 : 16));
    const key = { endpointId: e.endpointId, identity: e.identity, egress: e.egress, ...(e.staged === true ? { staged: true as const } : {}), proto, port: e.port ?? 0, portPrefixLen };
    this.policy.set(key, { cookie: e.cookie, deny: e.deny ? 1 : 0, l4PrefixBits: proto === 0 ? 0 : 8 + portPrefixLen });
    if (POLICY_KEY_FIXED_BITS !== 72) throw new Error('policy key layout changed: review addPolicy');
  }

  ctKey(t: CtTuple): ReturnType<typeof ct4Key.read> {
    return { saddr: parseIp(t.saddr), daddr: parseIp(t.daddr), sport: t.sport, dport: t.dport, proto: t.proto, flags: 0 };
  }

  /** The conntrack entry of a flow's original direction (TCP map for TCP, else the other; the IPv6 maps for IPv6 addresses). */
  ct(t: CtTuple): CtEntryValue | undefined {
    if (parseIp(t.saddr).family === 6) return (t.proto === 6 ? this.ct6Tcp : this.ct6Any).get(this.ctKey(t));
    return (t.proto === 6 ? this.ctTcp : this.ctAny).get(this.ctKey(t));
  }

  /** Entries in the IPv4 conntrack maps, or in the IPv6 ones with `family` 6. */
  async ctCount(family: 4 | 6 = 4): Promise<number> {
    let n = 0;
    for await (const _ of (family === 6 ? this.ct6Tcp : this.ctTcp).keys()) n++;
    for await (const _ of (family === 6 ? this.ct6Any : this.ctAny).keys()) n++;
    return n;
  }

  /** Packets and bytes under (reason, direction), summed over CPUs; reason as a positive code or 0. */
  metric(reason: number, direction: number): MetricCount {
    const v = this.metrics.get({ reason: Math.abs(reason), direction });
    const sum: MetricCount = { packets: 0n, bytes: 0n };
    for (const c of v ?? []) {
      sum.packets += c.packets;
      sum.bytes += c.bytes;
    }
    return sum;
  }

  /**
   * The events the programs emitted since the last call, in order. Waits
   * for `atLeast` of them (5 s at most), then until none arrive for a short
   * while, so a test also sees events it did not expect.
   */
  async takeEvents(atLeast = 0): Promise<DatapathEvent[]> {
    const deadline = Date.now() + 5000;
    while (this.#events.length < atLeast && Date.now() < deadline) await sleep(5);
    let seen = -1;
    while (seen !== this.#events.length) {
      seen = this.#events.length;
      await sleep(EVENT_SETTLE_MS);
    }
    if (this.#readerError !== undefined) throw this.#readerError;
    return this.#events.splice(0);
  }

  async close(): Promise<void> {
    try {
      await this.#reader.stop();
    } finally {
      this.object.close();
    }
  }
}

/** struct __sk_buff up to `ifindex`: the fields BPF_PROG_TEST_RUN takes from a context are mark, priority, ingress_ifindex, ifindex (and later ones), the rest zero. */
const SKB_INGRESS_IFINDEX_OFFSET = 36;
const SKB_CONTEXT_SIZE = 44;

export function skbContext(o: { ingressIfindex: number }): Buffer {
  const ctx = Buffer.alloc(SKB_CONTEXT_SIZE);
  ctx.writeUInt32LE(o.ingressIfindex, SKB_INGRESS_IFINDEX_OFFSET);
  return ctx;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** An event's addresses as text, for assertions. */
export function eventAddresses(e: DatapathEvent): { saddr: string; daddr: string } {
  return { saddr: formatIp(e.saddr), daddr: formatIp(e.daddr) };
}
