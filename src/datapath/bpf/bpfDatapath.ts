/**
 * The eBPF datapath: the routing datapath (src/datapath/linux) plumbs links,
 * addresses and routes; this adds the programs on every lxc device and on
 * the host device, and the per-endpoint facts in pinned maps — endpoint
 * entries, policy entries (as diffs), the ipcache mirror, the trace level.
 * Everything lives under `<bpffs root>/tendril/` and outlives the agent:
 * pods stay enforced while it is down, and the next agent start reuses the
 * maps (conntrack survives) and replaces the programs atomically.
 */
import { existsSync } from 'node:fs';
import { dirname, relative, resolve } from 'node:path';
import type { IPCache } from '../../ipcache/index.js';
import type { Logger } from '../../logging/logger.js';
import { formatPrefix, type IpAddress, type IpPrefix, parseIp, prefixOf, tryParseInterfaceAddress, tryParseIp, tryParsePrefix } from '../../netip/index.js';
import { type Netlink, NetlinkBatch } from '../kernel/netlink/index.js';
import { BPFFS_ROOT, BpfMap, codec, ensureBpffs, isOnBpffs, mkdirPinDir } from '../kernel/bpf/index.js';
import { HOST_DEVICE } from '../linux/hostDevice.js';
import { HostNetlink, kernel, openPodNetlink } from '../linux/kernel.js';
import { LinuxDatapath } from '../linux/linuxDatapath.js';
import { removeMasquerade } from '../linux/masquerade.js';
import { RemoteNodeRoutes } from '../linux/remoteNodeRoutes.js';
import { interfaceSysctl, setSysctl } from '../linux/sysctl.js';
import { type AdoptedPodSpec, type AttachmentOwnership, type AttachmentReport, type DeviceAttachment, type Datapath, DatapathError, type EndpointDatapathState, type NetnsKind, type NodeNetworkSpec, type PodNetwork, type PodNetworkSpec, type PodTeardownSpec, type PodAddress, type RecordedAttachment, type RoutingMode } from '../types.js';
import { ConfigFlag, MAGLEV_DEFAULT_TABLE_SIZE, MapName, TraceLevel, type MapNameValue } from './constants.js';
import { EndpointMap } from './endpointMap.js';
import { datapathPinDir } from './inspect.js';
import { IpcacheMapMirror, type IpcacheWriteStats } from './ipcacheMap.js';
import { detectDevices, LOOPBACK, NodeDevices } from './devices.js';
import { lbMapSet, LbMaps } from './lbMaps.js';
import { configNatPorts } from './natPorts.js';
import { datapathConfig, type NatPortRangeValue, deviceInfo, type IpcacheValue, endpointInfo, endpointKey, ipcacheKey, ipcacheValue, ipmasqKey, NO_NAT_CONFIG, policyEntry, policyKey } from './layout.js';
import { type DatapathObjects, loadDatapathObjects, type MapSizes } from './objects.js';
import { TunnelDevice } from './overlay.js';
import { ServiceRoutes } from './serviceRoutes.js';
import { PolicyMapWriter } from './policyMapWriter.js';
import { type AttachPolicy, ProgramLinks } from './programLinks.js';

type DatapathConfigValue = codec.CodecValue<typeof datapathConfig>;

/** Whether `path` lies strictly inside directory `dir`. */
function isBelow(path: string, dir: string): boolean {
  const rel = relative(resolve(dir), resolve(path));
  return rel !== '' && !rel.startsWith('..') && !rel.startsWith('/');
}

export interface BpfDatapathOptions {
  /** The bpffs mount (mounted when missing); pins go under `<root>/tendril/`. */
  bpffsRoot: string;
  log: Logger;
  mapSizes?: MapSizes;
  /** TraceLevel; NEW_FLOWS unless given. */
  traceLevel?: number;
  /** Where bpf_lxc.o and bpf_host.o are (default: the package's build/bpf). */
  objectDir?: string;
  /**
   * IPv4 pod CIDRs of this node routed to tendril_host behind every pod's /32,
   * so a packet to a pod address without an endpoint is dropped by the host
   * program (DROP_UNKNOWN_ENDPOINT) instead of leaving by the default route.
   */
  fallbackRouteCidrs?: readonly string[];
  /** How programs go on pods' lxc devices (see AttachPolicy); `clsact` unless given. The host device uses tcx where the kernel has it. */
  lxcAttach?: AttachPolicy;
  /** Entries of each service's Maglev table (a prime); MAGLEV_DEFAULT_TABLE_SIZE unless given. */
  maglevTableSize?: number;
  /** ClusterIPs are frontends for traffic from outside too (ConfigFlag.EXTERNAL_CLUSTERIP); false unless given. */
  externalClusterIp?: boolean;
  /** --policy-audit-mode (ConfigFlag.POLICY_AUDIT): policy refusals are reported and pass; false unless given. */
  policyAudit?: boolean;
  /** SNAT's source ports (at most NAT_PORT_RANGES ranges, see natPorts.ts); the programs' NAT_PORT_MIN..NAT_PORT_MAX unless given. */
  natPortRanges?: readonly NatPortRangeValue[];
  /** Conntrack entries one endpoint may hold (--bpf-ct-endpoint-max); 0 or undefined = no budget. */
  ctEndpointMax?: number;
  /**
   * --devices: the node's devices (NodePort from outside, masquerade out);
   * undefined = every interface that is up with a global IPv4 address, except
   * lo, tendril's own and pods'. A named device that does not exist fails setupNode.
   */
  devices?: readonly string[];
  /** Pod traffic leaving the masquerade CIDRs is SNATed to the device's address (in BPF; no nftables table); true unless false. */
  masquerade?: boolean;
  /**
   * How other nodes' pods are reached (--routing-mode, --tunnel-port, the
   * pod MTU); absent = native routing without touching tendril_host's MTU.
   * Tunnel: tendril_vxlan on `tunnelPort` with MTU `podMtu`. Both modes give
   * tendril_host the pod MTU (what the node sends to remote pods fits).
   */
  routing?: BpfRoutingOptions;
}

export interface BpfRoutingOptions {
  mode: RoutingMode;
  tunnelPort: number;
  podMtu: number;
  /** This node's underlay address (its ipcache entries' hostIP): entries it hosts are never tunnelled. */
  nodeIp?: string;
  /** Its IPv6 InternalIP next to an IPv4 nodeIp (an IPv6 nodeIp is its own): an IPv6 NodePort flow's SNAT source to a backend through the overlay. */
  nodeIp6?: string;
}

export class BpfDatapath implements Datapath {
  readonly enforcesPolicy = true;
  /** `<bpffs root>/tendril`: the monitor, inspection and CT GC find the maps here. */
  readonly bpfPinDir: string;
  readonly #linux = new LinuxDatapath({ proxyArp: false, nftMasquerade: false });
  readonly #host: HostNetlink;
  /** lxc device name → endpoint ID, as syncEndpoint last saw it. */
  readonly #endpointByIf = new Map<string, number>();
  readonly #ipcache: IpcacheMapMirror;
  /** Attachments addPod started, by lxc device name, until syncEndpoint (or removePod) waits for them. */
  readonly #attaching = new Map<string, Promise<void>>();
  /** Adopted pods' interface MACs by host interface (their endpoint records carry none). */
  readonly #adoptedPodMac = new Map<string, string>();
  #closed = false;
  /** The masquerade CIDRs written to tendril_ipmasq4, both families (canonical text). */
  readonly #ipmasq: BpfMap<IpPrefix, number>;
  /** tendril_devices and the programs on the node's devices. */
  readonly devices: NodeDevices;
  /** Routes to other nodes' pod CIDRs (the node registry drives it). */
  readonly nodeRouting: RemoteNodeRoutes;
  /** tendril_vxlan: made in tunnel mode, removed in native mode. */
  readonly tunnel: TunnelDevice;
  /** What tendril_config holds besides the options: the devices the programs redirect to (0 = none yet). */
  #hostIfindex = 0;
  #tunnelIfindex = 0;

  private constructor(
    host: HostNetlink,
    private readonly opts: BpfDatapathOptions,
    private readonly objects: DatapathObjects,
    readonly endpoints: EndpointMap,
    readonly policy: PolicyMapWriter,
    readonly links: ProgramLinks,
    ipcacheMap: BpfMap<IpPrefix, IpcacheValue>,
    private readonly config: BpfMap<number, DatapathConfigValue>,
    /** Service load-balancing: the tendril_lb4_* maps and the node's routes to ClusterIPs. */
    readonly loadBalancer: LbMaps,
    ipmasq: BpfMap<IpPrefix, number>,
    devices: BpfMap<number, codec.CodecValue<typeof deviceInfo>>,
  ) {
    this.#host = host;
    this.bpfPinDir = datapathPinDir(opts.bpffsRoot);
    this.#ipcache = new IpcacheMapMirror(ipcacheMap, opts.log, opts.routing?.nodeIp);
    this.#ipmasq = ipmasq;
    this.devices = new NodeDevices({
      map: devices,
      links,
      programs: { fromNetdev: objects.fromNetdev, toNetdev: objects.toNetdev, toLo: objects.toLo },
      netlink: () => host.get(),
      log: opts.log,
    });
    this.nodeRouting = new RemoteNodeRoutes({ mode: opts.routing?.mode ?? 'native', netlink: () => host.get(), log: opts.log });
    this.tunnel = new TunnelDevice({ netlink: () => host.get(), links, log: opts.log });
  }

  /**
   * Mounts bpffs if needed, loads both objects with their maps pinned (or
   * reused), and reads the maps' current entries into the shadows.
   */
  static async open(opts: BpfDatapathOptions): Promise<BpfDatapath> {
    // A root below the standard mount (a directory of its own there) needs that mount first: it is
    // not there at boot. A root that is a directory to be on an existing bpffs is made there; only
    // elsewhere is a bpffs mounted.
    if (isBelow(opts.bpffsRoot, BPFFS_ROOT)) await ensureBpffs(BPFFS_ROOT);
    if (!existsSync(opts.bpffsRoot) && isOnBpffs(dirname(opts.bpffsRoot))) await mkdirPinDir(opts.bpffsRoot);
    await ensureBpffs(opts.bpffsRoot);
    const pinDir = datapathPinDir(opts.bpffsRoot);
    const objects = await loadDatapathObjects({ pinDir, log: opts.log, ...(opts.mapSizes ? { mapSizes: opts.mapSizes } : {}), ...(opts.objectDir ? { objectDir: opts.objectDir } : {}) });
    const host = new HostNetlink(1);
    try {
      const raw = (name: MapNameValue) => {
        const m = objects.lxc.maps.get(name) ?? objects.host.maps.get(name) ?? objects.netdev.maps.get(name);
        if (!m) throw new DatapathError('failed', `no eBPF object has map ${name}`);
        return m.map;
      };
      const endpoints = await EndpointMap.open(new BpfMap(raw(MapName.ENDPOINTS), endpointKey, endpointInfo));
      const policy = await PolicyMapWriter.open(new BpfMap(raw(MapName.POLICY), policyKey, policyEntry));
      const links = await ProgramLinks.open(pinDir, () => host.get());
      const loadBalancer = await LbMaps.open({
        maps: lbMapSet(raw),
        routes: new ServiceRoutes({ netlink: () => host.get(), log: opts.log }),
        log: opts.log,
        maglevTableSize: opts.maglevTableSize ?? MAGLEV_DEFAULT_TABLE_SIZE,
      });
      const dp = new BpfDatapath(
        host,
        opts,
        objects,
        endpoints,
        policy,
        links,
        new BpfMap(raw(MapName.IPCACHE), ipcacheKey, ipcacheValue),
        new BpfMap(raw(MapName.CONFIG), codec.u32, datapathConfig),
        loadBalancer,
        new BpfMap(raw(MapName.NO_MASQUERADE), ipmasqKey, codec.u8),
        new BpfMap(raw(MapName.DEVICES), codec.u32, deviceInfo),
      );
      dp.#restoreConfig();
      opts.log.info({ pinDir, endpoints: endpoints.endpointIds().length, policyEndpoints: policy.endpointIds().length }, 'eBPF datapath loaded');
      return dp;
    } catch (err) {
      objects.close();
      await host.close();
      throw err;
    }
  }

  /**
   * At open: the options' values, with the devices a previous run wrote kept
   * until setupNode checks them (the devices outlive the agent; packets
   * keep being redirected meanwhile). Native mode drops the tunnel at once.
   */
  #restoreConfig(): void {
    const previous = this.config.get(0);
    this.#hostIfindex = previous?.hostIfindex ?? 0;
    const wasTunnel = previous !== undefined && (previous.flags & ConfigFlag.TUNNEL) !== 0;
    this.#tunnelIfindex = wasTunnel && this.opts.routing?.mode === 'tunnel' ? previous.tunnelIfindex : 0;
    this.#writeConfig();
  }

  /** The node's InternalIP as tendril_config holds it (host-order number; 0 when it is not IPv4 or not known). */
  get #nodeIpv4(): number {
    const ip = this.opts.routing?.nodeIp === undefined ? undefined : tryParseIp(this.opts.routing.nodeIp);
    return ip?.family === 4 ? Number(ip.bits) : 0;
  }

  /** The node's IPv6 InternalIP as tendril_config holds it (`::` when it has none). */
  get #nodeIpv6(): IpAddress {
    const r = this.opts.routing;
    for (const text of [r?.nodeIp6, r?.nodeIp]) {
      const ip = text === undefined ? undefined : tryParseIp(text);
      if (ip?.family === 6) return ip;
    }
    return NO_NAT_CONFIG.nodeIpv6;
  }

  /** tendril_config in one write: the host and tunnel devices always go together. */
  #writeConfig(): void {
    this.config.set(0, {
      traceLevel: this.opts.traceLevel ?? TraceLevel.NEW_FLOWS,
      flags: (this.#tunnelIfindex !== 0 ? ConfigFlag.TUNNEL : 0) | (this.opts.externalClusterIp === true ? ConfigFlag.EXTERNAL_CLUSTERIP : 0) | (this.opts.policyAudit === true ? ConfigFlag.POLICY_AUDIT : 0),
      hostIfindex: this.#hostIfindex,
      maglevTableSize: this.opts.maglevTableSize ?? MAGLEV_DEFAULT_TABLE_SIZE,
      tunnelIfindex: this.#tunnelIfindex,
      nodeIpv4: this.#nodeIpv4,
      nodeIpv6: this.#nodeIpv6,
      natPorts: configNatPorts(this.opts.natPortRanges),
      ctEndpointMax: this.opts.ctEndpointMax ?? 0,
      // The loader's take-over window (objects.ts) closed before the objects were handed over.
      migrationUntilNs: 0n,
    });
  }

  /** Mirrors the agent's IPCache into tendril_ipcache from now on (current entries first). */
  attachIpcache(ipcache: IPCache): void {
    this.#ipcache.start(ipcache);
  }

  ipcacheWriteStats(): IpcacheWriteStats {
    return this.#ipcache.writeStats();
  }

  /**
   * After the agent's restore: the pinned entries of endpoints the agent no
   * longer has go, unless their lxc device still exists (a pod whose record
   * was quarantined keeps its network, as the routing datapath keeps its
   * routes); stale ipcache entries and pins of links whose device is gone too.
   */
  async restoreDone(live: ReadonlyArray<{ id: number; hostIfName: string }>): Promise<void> {
    for (const ep of live) if (!this.#endpointByIf.has(ep.hostIfName)) this.#endpointByIf.set(ep.hostIfName, ep.id);
    const liveIds = new Set(live.map((ep) => ep.id));
    const nl = await this.#host.get();
    const devices = new Set((await kernel(() => nl.listLinks())).map((l) => l.index));
    const gone = new Set(
      [...this.endpoints.endpointIds(), ...this.policy.endpointIds()].filter((id) => {
        if (liveIds.has(id)) return false;
        const ifindex = this.endpoints.ifindexOf(id);
        return ifindex === undefined || !devices.has(ifindex);
      }),
    );
    for (const id of gone) {
      this.endpoints.remove(id);
      this.policy.remove(id);
    }
    const removedIpcache = await this.#ipcache.prune();
    const prunedLinks = await this.links.pruneDetached();
    if (gone.size > 0 || prunedLinks.length > 0) this.opts.log.info({ endpoints: [...gone], links: prunedLinks, ipcache: removedIpcache }, 'removed datapath state of endpoints that are gone');
  }

  /** Closes this process's handles; programs, links and maps stay in force. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#ipcache.stop();
    this.objects.close();
    await this.#host.close();
    await this.#linux.close();
  }

  async attachmentStatus(): Promise<AttachmentReport> {
    const nl = await this.#host.get();
    const both = ['ingress', 'egress'] as const;
    const check = async (name: string, expected: ReadonlyArray<'ingress' | 'egress'>, role: DeviceAttachment['role'] = 'node'): Promise<DeviceAttachment> => {
      const link = await kernel(() => nl.findLink(name));
      const missing: Array<'ingress' | 'egress'> = [];
      for (const d of expected) if (!link || !(await this.links.inKernel(name, link.index, d))) missing.push(d);
      return { name, role, expected: [...expected], missing };
    };
    const devices: DeviceAttachment[] = [];
    for (const d of this.devices.devices) devices.push(await check(d.name, both));
    devices.push(await check(LOOPBACK, ['egress'], 'loopback'), await check(HOST_DEVICE, both, 'host'));
    const missing: string[] = [];
    for (const name of [...this.#endpointByIf.keys()].sort()) if ((await check(name, both)).missing.length > 0) missing.push(name);
    return { devices, endpoints: { expected: this.#endpointByIf.size, attached: this.#endpointByIf.size - missing.length, missing } };
  }

  async setupNode(spec: NodeNetworkSpec): Promise<void> {
    await this.#linux.setupNode(spec);
    const nl = await this.#host.get();
    const dev = await kernel(() => nl.getLink(HOST_DEVICE));
    if (!this.links.isAttached(HOST_DEVICE, dev.index)) {
      // tendril_host egress: what the node routes to it (the pod CIDRs' fallback); ingress: from tendril_net.
      await this.links.attach(HOST_DEVICE, dev.index, { ingress: this.objects.toHost, egress: this.objects.fromHost });
    }
    this.#hostIfindex = dev.index;
    await this.#setupRouting(nl, dev.index, dev.mtu);
    this.#writeConfig();
    const cidrs = this.opts.fallbackRouteCidrs ?? [];
    if (cidrs.length > 0) {
      const batch = new NetlinkBatch();
      // Behind every pod's /32; metric high so a route someone else made for the CIDR wins.
      for (const text of cidrs) {
        const a = tryParseInterfaceAddress(text, { leadingZeros: true });
        if (a?.address.family === 4) batch.replaceRoute({ dst: formatPrefix(prefixOf(a.address, a.length)), oif: dev.index, priority: 4096 });
      }
      await kernel(() => nl.apply(batch));
    }
    await this.#removeNftMasquerade();
    await this.#syncMasqueradeCidrs(spec.masqueradeCidrs);
    const endpointIfs = new Set(this.#endpointByIf.keys());
    const devices = await detectDevices(nl, { ...(this.opts.devices !== undefined ? { configured: this.opts.devices } : {}), exclude: (name) => endpointIfs.has(name) || this.#adoptedPodMac.has(name) });
    await this.devices.sync(devices, this.opts.masquerade ?? true);
    // One router address per family: the node's routes of that family into tendril_host take it as source.
    const routers = [4, 6].flatMap((family) => spec.routerAddresses.find((a) => a.family === family) ?? []);
    for (const router of routers) await this.loadBalancer.setRouter(router.ip);
    // Last: the routes to remote pods lead into tendril_host once the tunnel is in the config.
    for (const router of routers) await this.nodeRouting.setRouter(router.ip);
  }

  /**
   * tendril_host takes the pod MTU (what the node sends to remote pods must
   * fit them, and the overlay's header in tunnel mode); tunnel mode makes
   * tendril_vxlan, native mode removes one a tunnel-mode run left.
   */
  async #setupRouting(nl: Netlink, hostIfindex: number, hostMtu: number): Promise<void> {
    const routing = this.opts.routing;
    if (routing !== undefined && hostMtu !== routing.podMtu) await kernel(() => nl.setLinkMtu(hostIfindex, routing.podMtu));
    if (routing?.mode === 'tunnel') {
      this.#tunnelIfindex = await this.tunnel.ensure({ port: routing.tunnelPort, mtu: routing.podMtu, program: this.objects.fromOverlay });
      return;
    }
    this.#tunnelIfindex = 0;
    // The config stops naming the device before it goes.
    this.#writeConfig();
    if (await this.tunnel.remove()) this.opts.log.info({ device: this.tunnel.name }, 'removed the overlay device a tunnel-mode run left (native routing now)');
  }

  /** The routing datapath's nftables masquerade table, left by an earlier run: masquerading is the programs' job here. */
  async #removeNftMasquerade(): Promise<void> {
    try {
      await removeMasquerade();
    } catch (err) {
      // No nft on the node means no table either.
      this.opts.log.debug({ err }, 'removing the nftables masquerade table failed (nft missing?)');
    }
  }

  /** tendril_ipmasq4 holds exactly the masquerade CIDRs (IPv6 ones arrive only with --ipv6-masquerade: the agent filters them). */
  async #syncMasqueradeCidrs(cidrs: readonly string[]): Promise<void> {
    const wanted = new Map<string, IpPrefix>();
    for (const text of cidrs) {
      const p = tryParsePrefix(text, { hostBits: 'mask', leadingZeros: true });
      if (p === undefined) throw new DatapathError('failed', `invalid masquerade CIDR ${JSON.stringify(text)}`);
      wanted.set(formatPrefix(p), p);
    }
    try {
      for (const p of wanted.values()) this.#ipmasq.set(p, 1);
      const stale: IpPrefix[] = [];
      for await (const p of this.#ipmasq.keys()) if (!wanted.has(formatPrefix(p))) stale.push(p);
      for (const p of stale) this.#ipmasq.delete(p);
    } catch (err) {
      throw new DatapathError('failed', `writing ${this.#ipmasq.name} failed: ${(err as Error).message}`, [], '', { cause: err });
    }
  }

  /**
   * A local backend's reply to the node (NodePort on the node's own address)
   * gets a node address as source in from_container: the stack must take a
   * local source on the lxc device, and not drop it by reverse path.
   */
  async #lxcSysctls(hostIfName: string): Promise<void> {
    await setSysctl(interfaceSysctl(4, hostIfName, 'accept_local'), '1');
    await setSysctl(interfaceSysctl(4, hostIfName, 'rp_filter'), '0');
  }

  classifyNetns(path: string): Promise<NetnsKind> {
    return this.#linux.classifyNetns(path);
  }

  preflightPod(spec: Pick<PodNetworkSpec, 'containerId' | 'netns' | 'ifName'>): Promise<void> {
    return this.#linux.preflightPod(spec);
  }

  /**
   * The veth pair and routes; the programs' attachment starts here and
   * syncEndpoint waits for it, so it runs while the endpoint's identity and
   * policy are worked out (a tcx attach, when configured, waits out an RCU
   * grace period: 10-30 ms here): the ADD still answers only once
   * it is in force (the first regeneration's syncEndpoint is part of the ADD),
   * and until then the device runs no program of ours but has no endpoint
   * entry either.
   */
  async addPod(spec: PodNetworkSpec): Promise<PodNetwork> {
    const net = await this.#linux.addPod(spec);
    const attaching = this.#attachLxc(net.hostIfName, net.hostIfIndex);
    // Observed by syncEndpoint or removePod; never an unhandled rejection meanwhile.
    attaching.catch(() => undefined);
    this.#attaching.set(net.hostIfName, attaching);
    return net;
  }

  /** Waits for addPod's attachment to the device, if one is under way; its failure is thrown here. */
  async #attached(hostIfName: string): Promise<void> {
    const pending = this.#attaching.get(hostIfName);
    if (!pending) return;
    try {
      await pending;
    } finally {
      if (this.#attaching.get(hostIfName) === pending) this.#attaching.delete(hostIfName);
    }
  }

  /** Attaches the lxc programs to a pod's device the configured way (clsact unless told otherwise), with the device's sysctls. */
  async #attachLxc(hostIfName: string, ifindex: number): Promise<void> {
    await Promise.all([this.links.attach(hostIfName, ifindex, this.#lxcPrograms(), this.opts.lxcAttach ?? 'clsact'), this.#lxcSysctls(hostIfName)]);
  }

  #lxcPrograms() {
    // lxc ingress = what the pod sends; lxc egress = what the node delivers to it.
    return { ingress: this.objects.fromContainer, egress: this.objects.toContainer };
  }

  async removePod(spec: PodTeardownSpec): Promise<void> {
    const hostIf = spec.hostIfName ?? this.#linux.podHostIfName(spec.containerId, spec.ifName);
    // An attach still under way must end before the pins can go (its outcome does not matter now).
    await this.#attached(hostIf).catch(() => undefined);
    await this.#linux.removePod(spec);
    this.#forgetEndpoint(hostIf);
    this.links.forget(hostIf);
  }

  #forgetEndpoint(hostIf: string): void {
    const id = this.#endpointByIf.get(hostIf);
    if (id === undefined) return;
    this.policy.remove(id);
    this.endpoints.remove(id);
    this.#endpointByIf.delete(hostIf);
  }

  podHostIfName(containerId: string, ifName: string): string {
    return this.#linux.podHostIfName(containerId, ifName);
  }

  async adoptPod(spec: AdoptedPodSpec): Promise<{ hostIfIndex: number; hostMac: string }> {
    const r = await this.#linux.adoptPod(spec);
    // Delivery rewrites the destination MAC to the pod's: the endpoint record of an adopted pod has none.
    const pod = await openPodNetlink(spec.netns);
    try {
      const peer = await kernel(() => pod.findLink(spec.ifName));
      if (peer) this.#adoptedPodMac.set(spec.hostIfName, peer.mac);
    } finally {
      await pod.close();
    }
    await this.#attachLxc(spec.hostIfName, r.hostIfIndex);
    return r;
  }

  async releaseAdoptedPod(spec: { hostIfName: string; addresses: PodAddress[] }): Promise<void> {
    // The pod's entries first: a packet in between is dropped as an unknown source, never let through.
    this.#forgetEndpoint(spec.hostIfName);
    this.#adoptedPodMac.delete(spec.hostIfName);
    await this.links.detach(spec.hostIfName);
    await this.#linux.releaseAdoptedPod(spec);
  }

  /**
   * Routes and link state (the routing datapath), the programs if this
   * process has not attached them yet (a restored endpoint: the new build
   * replaces the old one through the pinned links), then the policy entries
   * and last the endpoint entries: a new endpoint becomes known to the
   * programs only once its policy is complete.
   */
  async syncEndpoint(state: EndpointDatapathState): Promise<void> {
    await Promise.all([this.#linux.syncEndpoint(state), this.#attached(state.hostIfName)]);
    if (!this.links.isAttached(state.hostIfName, state.hostIfIndex)) await this.#attachLxc(state.hostIfName, state.hostIfIndex);
    const previous = this.#endpointByIf.get(state.hostIfName);
    if (previous !== undefined && previous !== state.id) this.#forgetEndpoint(state.hostIfName);
    const endpoint = { id: state.id, identity: state.identity, ifindex: state.hostIfIndex, lxcMac: state.hostMac, podMac: state.podMac || this.#podMacOf(state), addresses: state.addresses, staged: state.policy.stagedEntries !== undefined };
    // The staged flag goes off before the staged view's entries go (else new flows would see an empty staged view), and on after they are written.
    if (!endpoint.staged && this.endpoints.isStaged(state.id)) this.endpoints.sync(endpoint);
    this.policy.sync(state.id, state.policy.entries, state.policy.stagedEntries);
    this.endpoints.sync(endpoint);
    this.#endpointByIf.set(state.hostIfName, state.id);
  }

  /** An adopted pod's MAC: learnt at adoption, else (after a restart) what the endpoint map already holds for it. */
  #podMacOf(state: EndpointDatapathState): string {
    const learnt = this.#adoptedPodMac.get(state.hostIfName);
    if (learnt !== undefined) return learnt;
    const a = state.addresses[0];
    const held = a && this.endpoints.map.get(parseIp(a.ip));
    return held && held.endpointId === state.id && held.podMac !== '00:00:00:00:00:00' ? held.podMac : '';
  }

  checkPod(spec: PodNetworkSpec): Promise<void> {
    return this.#linux.checkPod(spec);
  }

  podExists(containerId: string, ifName: string, hostIfName?: string): Promise<boolean> {
    return this.#linux.podExists(containerId, ifName, hostIfName);
  }

  verifyAttachment(rec: RecordedAttachment): Promise<AttachmentOwnership> {
    return this.#linux.verifyAttachment(rec);
  }

  listPodHostInterfaces(): Promise<string[]> {
    return this.#linux.listPodHostInterfaces();
  }

  async removeHostInterface(name: string): Promise<void> {
    await this.#attached(name).catch(() => undefined);
    await this.#linux.removeHostInterface(name);
    this.#forgetEndpoint(name);
    this.links.forget(name);
  }
}
