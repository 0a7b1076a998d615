import { validateAbsolutePath, validateInterfaceName } from '../../cni/index.js';
import type { Logger } from '../../logging/logger.js';
import { isKernelError } from '../kernel/errors.js';
import { type Link, type Netlink, NetlinkBatch, type Route, RT_SCOPE, RT_TABLE_MAIN } from '../kernel/netlink/index.js';
import { type AdoptedPodSpec, type AttachmentOwnership, DatapathError, type Datapath, type EndpointDatapathState, type NetnsKind, type NodeNetworkSpec, type PodAddress, type PodNetwork, type PodNetworkSpec, type PodTeardownSpec, type RecordedAttachment } from '../types.js';
import { attachmentOwnership } from './attachmentOwnership.js';
import { ensureHostDevice } from './hostDevice.js';
import { HostNetlink, deleteLinkIfPresent, kernel, openPodNetlink, openPodNetlinkIfPresent } from './kernel.js';
import { POD_HOST_IFNAME, canonicalIp, hostInterfaceName, hostPrefix } from './links.js';
import { applyMasquerade } from './masquerade.js';
import { RemoteNodeRoutes } from './remoteNodeRoutes.js';
import { classifyNetnsPath } from './netnsKind.js';
import { getSysctl, interfaceSysctl, setSysctl } from './sysctl.js';

/** The metric the kernel gives an IPv6 route added without one (IP6_RT_PRIO_USER); IPv4's is 0. */
const IPV6_DEFAULT_METRIC = 1024;

/**
 * Whether `r` is the host route hostSide writes for pod address `a` over the
 * lxc device: main table, no gateway, the gateway as preferred source, link
 * scope on IPv4 (IPv6 routes have no scope: the kernel answers universe),
 * the family's default metric (0 for IPv4, 1024 for IPv6).
 */
function isPodHostRoute(r: Route, a: PodAddress, oif: number): boolean {
  return r.dst === hostPrefix(a) && r.oif === oif && r.gateway === undefined && r.prefsrc === canonicalIp(a.gateway) && r.scope === (a.family === 4 ? RT_SCOPE.link : RT_SCOPE.universe) && r.table === RT_TABLE_MAIN && (r.priority ?? 0) === (a.family === 6 ? IPV6_DEFAULT_METRIC : 0);
}

function alreadyExists(spec: Pick<PodNetworkSpec, 'netns' | 'ifName'>): DatapathError {
  return new DatapathError('exists', `interface ${spec.ifName} already exists in ${spec.netns} and is not this attachment's: refusing to replace it`);
}

/** Whether two links are the two ends of one veth pair (each names the other's index as its peer). */
function isVethPair(a: Link, b: Link): boolean {
  return a.kind === 'veth' && b.kind === 'veth' && a.linkIndex === b.index && b.linkIndex === a.index && a.linkNetnsId !== undefined && b.linkNetnsId !== undefined;
}

/**
 * Clears the way for an ADD whose veth could not be created: only what is
 * provably this attachment's own leftover goes (an interrupted ADD). The
 * host name is derived from the container and interface, and the caller
 * made sure no endpoint owns it; deleting it takes its peer along. An
 * interface of the pod's name that is not that peer belongs to someone else
 * (another attachment, the runtime): DatapathError `exists`, nothing deleted.
 */
async function removeOwnLeftover(host: Netlink, pod: Netlink, hostIf: string, spec: PodNetworkSpec): Promise<void> {
  const hostLink = await requireFreeOrOwn(host, pod, hostIf, spec);
  if (hostLink) await deleteLinkIfPresent(host, hostLink.index);
}

/** The pod's interface name is free or held by this attachment's own veth peer (else `exists`); answers the attachment's host end, if any. */
async function requireFreeOrOwn(host: Netlink, pod: Netlink, hostIf: string, spec: Pick<PodNetworkSpec, 'netns' | 'ifName'>): Promise<Link | undefined> {
  const [hostLink, podLink] = await Promise.all([host.findLink(hostIf), pod.findLink(spec.ifName)]);
  if (podLink && !(hostLink && isVethPair(hostLink, podLink))) throw alreadyExists(spec);
  return hostLink;
}

/**
 * Pods as routed veth pairs, the way Cilium plumbs them: a /32 (or /128) in the
 * pod, a link-scoped route to the gateway and a default route through it; on
 * the host a /32 route over the pod's lxc device, which answers ARP for the
 * gateway by proxy until the eBPF datapath does.
 */
export class LinuxDatapath implements Datapath {
  /** Netlink in the agent's own namespace; pod namespaces get a handle per call. */
  private readonly host = new HostNetlink();
  /** Whether the lxc device answers ARP for the gateway by proxy (off when eBPF answers it). */
  private readonly proxyArp: boolean;
  /** Whether setupNode installs the nftables masquerade table (off when eBPF masquerades). */
  private readonly nftMasquerade: boolean;
  /** Routes to other nodes' pod CIDRs via their node IPs; only native routing (the overlay needs the eBPF datapath). */
  readonly nodeRouting?: RemoteNodeRoutes;

  constructor(options: { proxyArp?: boolean; nftMasquerade?: boolean; nodeRouting?: { mode: 'native'; log: Logger } } = {}) {
    this.proxyArp = options.proxyArp ?? true;
    this.nftMasquerade = options.nftMasquerade ?? true;
    if (options.nodeRouting) this.nodeRouting = new RemoteNodeRoutes({ mode: options.nodeRouting.mode, netlink: () => this.host.get(), log: options.nodeRouting.log });
  }

  /** Closes the agent-namespace netlink socket (a later call opens it again). */
  close(): Promise<void> {
    return this.host.close();
  }

  async setupNode(spec: NodeNetworkSpec): Promise<void> {
    await ensureHostDevice(await this.host.get(), spec.routerAddresses);
    // The one process the Linux datapath still runs: nft, once per agent start.
    if (this.nftMasquerade) await applyMasquerade(spec.masqueradeCidrs);
  }

  async preflightPod(spec: Pick<PodNetworkSpec, 'containerId' | 'netns' | 'ifName'>): Promise<void> {
    validateAbsolutePath(spec.netns, 'netns path');
    validateInterfaceName(spec.ifName);
    const hostIf = hostInterfaceName(spec.containerId, spec.ifName);
    const pod = await openPodNetlink(spec.netns);
    try {
      const host = await this.host.get();
      await kernel(() => requireFreeOrOwn(host, pod, hostIf, spec));
    } finally {
      await pod.close();
    }
  }

  async addPod(spec: PodNetworkSpec): Promise<PodNetwork> {
    validateAbsolutePath(spec.netns, 'netns path');
    validateInterfaceName(spec.ifName);
    const hostIf = hostInterfaceName(spec.containerId, spec.ifName);
    // Opening the pod's handle is also the existence check: a missing namespace is netns-gone.
    const pod = await openPodNetlink(spec.netns);
    try {
      const host = await this.host.get();
      return await kernel(async () => {
        // The peer is created inside the pod's namespace directly, so its final name
        // can never clash with a host interface (no tmp name in the host namespace).
        const create = () => host.createVeth({ name: hostIf, mtu: spec.mtu, peer: { name: spec.ifName, netns: spec.netns, mtu: spec.mtu } });
        try {
          await create();
        } catch (err) {
          if (!isKernelError(err, 'EEXIST')) throw err;
          // Only on this path, so a normal ADD pays no extra requests.
          await removeOwnLeftover(host, pod, hostIf, spec);
          try {
            await create();
          } catch (retryErr) {
            // Something not ours came back under the name meanwhile: still not ours to delete.
            if (isKernelError(retryErr, 'EEXIST')) throw alreadyExists(spec);
            throw retryErr;
          }
        }
        try {
          const podSide = async (): Promise<Link> => {
            const podLink = await pod.getLink(spec.ifName);
            // One round trip for the pod's side; the kernel runs the messages in order.
            const batch = new NetlinkBatch().setLink('lo', { up: true }).setLink(podLink.index, { up: true });
            for (const a of spec.addresses) {
              batch.addAddress({ index: podLink.index, address: hostPrefix(a), nodad: a.family === 6 });
              batch.replaceRoute({ dst: hostPrefix({ ip: a.gateway }), oif: podLink.index, scope: 'link' });
              batch.replaceRoute({ dst: 'default', family: a.family, gateway: a.gateway, oif: podLink.index });
            }
            await pod.apply(batch);
            return podLink;
          };
          // The two sides are independent and go through different sockets: in parallel.
          const [podResult, hostResult] = await Promise.allSettled([podSide(), this.hostSide(hostIf, spec.addresses)]);
          if (podResult.status === 'rejected') throw podResult.reason;
          if (hostResult.status === 'rejected') throw hostResult.reason;
          const [podLink, hostLink] = [podResult.value, hostResult.value];
          return { hostIfName: hostIf, hostIfIndex: hostLink.index, hostMac: hostLink.mac, podIfIndex: podLink.index, podMac: podLink.mac };
        } catch (err) {
          // Deleting the host side removes the peer and the host routes with it.
          await deleteLinkIfPresent(host, hostIf).catch((cleanupErr: unknown) => {
            throw new DatapathError('failed', `${(err as Error).message}; removing ${hostIf} afterwards failed too: ${(cleanupErr as Error).message}`);
          });
          throw err;
        }
      });
    } finally {
      await pod.close();
    }
  }

  /**
   * Host side of a pod: proxy ARP for the gateway, the link up, a /32 (/128)
   * route per address. DatapathError `not-found` when the interface is missing.
   */
  private async hostSide(hostIf: string, addresses: PodAddress[]): Promise<Link> {
    const host = await this.host.get();
    return kernel(async () => {
      const link = await host.getLink(hostIf);
      // A sysctl of the agent's own namespace: a write under /proc/sys, no process.
      if (this.proxyArp) await setSysctl(interfaceSysctl(4, hostIf, 'proxy_arp'), '1');
      // The device forwards its pod's IPv6 whatever new devices start with here (they take
      // net.ipv6.conf.default.forwarding, which the node's own settings may have turned off).
      // Read first: a write takes the RTNL lock (the kernel retries the syscall while another
      // holder has it), and a device that inherited forwarding needs none.
      if (addresses.some((a) => a.family === 6)) {
        const forwarding = interfaceSysctl(6, hostIf, 'forwarding');
        if ((await getSysctl(forwarding)) !== '1') await setSysctl(forwarding, '1');
        // No duplicate address detection on the device's link-local address, before the link
        // goes up: while it is tentative the node sends no neighbour solicitation from it, so
        // every packet it forwards to the new pod (a reply from another node) waits ~2 s for
        // DAD to end. The link has the pod alone on its other end: nothing to detect.
        const dad = interfaceSysctl(6, hostIf, 'accept_dad');
        if ((await getSysctl(dad)) !== '0') await setSysctl(dad, '0');
      }
      // Only what is not already in force is written: an agent restart re-syncs every endpoint,
      // and an IPv6 route "replaced" by an equal one is not left alone as IPv4's is (the
      // kernel swaps in a new route, invalidating every cached IPv6 route of the node and
      // notifying listeners), so a restart would churn what is right.
      const batch = new NetlinkBatch();
      if (!link.up) batch.setLink(link.index, { up: true });
      const held = await Promise.all(([4, 6] as const).map((family) => (addresses.some((a) => a.family === family) ? host.listRoutes({ family, table: RT_TABLE_MAIN, link: link.index }) : [])));
      for (const a of addresses) {
        if (!held[a.family === 4 ? 0 : 1]!.some((r) => isPodHostRoute(r, a, link.index))) batch.replaceRoute({ dst: hostPrefix(a), oif: link.index, prefsrc: a.gateway });
      }
      if (batch.items.length > 0) await host.apply(batch);
      return link;
    });
  }

  classifyNetns(path: string): Promise<NetnsKind> {
    return classifyNetnsPath(path);
  }

  /** Until the eBPF datapath exists, a regeneration puts the host side back in force (routes, proxy ARP, link up). */
  async syncEndpoint(state: EndpointDatapathState): Promise<void> {
    validateInterfaceName(state.hostIfName);
    try {
      await this.hostSide(state.hostIfName, state.addresses);
    } catch (err) {
      if (err instanceof DatapathError && err.kind === 'not-found') throw new DatapathError('not-found', `host interface ${state.hostIfName} of endpoint ${state.id} does not exist`);
      throw err;
    }
  }

  async adoptPod(spec: AdoptedPodSpec): Promise<{ hostIfIndex: number; hostMac: string }> {
    validateInterfaceName(spec.hostIfName);
    validateInterfaceName(spec.ifName);
    validateAbsolutePath(spec.netns, 'netns path');
    const host = await this.host.get();
    const link = await kernel(() => host.findLink(spec.hostIfName));
    if (!link) throw new DatapathError('not-found', `host interface ${spec.hostIfName} does not exist`);
    await this.requireVethIntoPod(link, spec);
    await this.hostSide(spec.hostIfName, spec.addresses);
    return { hostIfIndex: link.index, hostMac: link.mac };
  }

  /**
   * Adoption turns on proxy ARP and routes over the interface, and the
   * caller's word is all that says it is a pod's: the node's uplink or
   * tendril_host would take the node off the network. So the kernel is
   * asked: the host end must be a veth whose peer lives in another
   * namespace, and in `netns` the link at the peer's index must be a veth
   * named `ifName` whose own peer is this host end. (Matching the two
   * netnsids exactly would need RTM_GETNSID; both ends naming each other
   * across namespaces, with the pod's name, is what is checked.)
   */
  private async requireVethIntoPod(link: Link, spec: AdoptedPodSpec): Promise<void> {
    const refuse = (why: string) => new DatapathError('refused', `refusing to adopt ${spec.hostIfName}: ${why}`);
    if (link.kind !== 'veth') throw refuse(`it is not a veth (${link.kind === undefined ? 'a device without a driver kind, such as a physical one' : `kind ${link.kind}`})`);
    // tendril_host and tendril_net are a pair within the node's namespace: no IFLA_LINK_NETNSID.
    if (link.linkNetnsId === undefined || link.linkIndex === undefined) throw refuse('its veth peer is in the node\'s own namespace, not a pod\'s');
    const pod = await openPodNetlink(spec.netns);
    try {
      const peerIndex = link.linkIndex;
      const peer = await kernel(() => pod.findLink(peerIndex));
      if (peer?.kind !== 'veth' || peer.linkIndex !== link.index || peer.linkNetnsId === undefined) throw refuse(`its veth peer is not in ${spec.netns}`);
      if (peer.name !== spec.ifName) throw refuse(`its peer in ${spec.netns} is ${peer.name}, not ${spec.ifName}`);
    } finally {
      await pod.close();
    }
  }

  async releaseAdoptedPod(spec: { hostIfName: string; addresses: PodAddress[] }): Promise<void> {
    validateInterfaceName(spec.hostIfName);
    const host = await this.host.get();
    await kernel(async () => {
      const link = await host.findLink(spec.hostIfName);
      // The routes went with the interface: the goal is reached.
      if (!link) return;
      for (const a of spec.addresses) {
        try {
          await host.deleteRoute({ dst: hostPrefix(a), link: link.index });
        } catch (err) {
          // Already gone (removed by hand): the goal is reached.
          if (!isKernelError(err, 'ESRCH')) throw err;
        }
      }
    });
  }

  async removePod(spec: PodTeardownSpec): Promise<void> {
    validateInterfaceName(spec.ifName);
    const hostIf = spec.hostIfName ?? hostInterfaceName(spec.containerId, spec.ifName);
    validateInterfaceName(hostIf);
    if (spec.netns !== '') validateAbsolutePath(spec.netns, 'netns path');
    const host = await this.host.get();
    // The pod's end goes with the host end, in the same kernel call. Whatever else carries
    // the pod's interface name in its namespace is not this attachment's (a second ADD into
    // the same namespace is refused), so nothing there is deleted by name.
    await kernel(() => deleteLinkIfPresent(host, hostIf));
    // Routes over the lxc device went with it; a route left on another device would be someone else's.
  }

  podHostIfName(containerId: string, ifName: string): string {
    return hostInterfaceName(containerId, ifName);
  }

  async checkPod(spec: PodNetworkSpec): Promise<void> {
    validateAbsolutePath(spec.netns, 'netns path');
    const hostIf = hostInterfaceName(spec.containerId, spec.ifName);
    const fail = (msg: string): never => {
      throw new DatapathError('not-found', msg);
    };
    const pod = await openPodNetlinkIfPresent(spec.netns);
    if (!pod) return fail(`network namespace ${spec.netns} does not exist`);
    try {
      const host = await this.host.get();
      await kernel(async () => {
        const hostLink = await host.findLink(hostIf);
        if (!hostLink?.up) return fail(`host interface ${hostIf} is missing or down`);
        const podLink = await pod.findLink(spec.ifName);
        if (!podLink?.up) return fail(`interface ${spec.ifName} is missing or down in ${spec.netns}`);
        if (podLink.mtu !== spec.mtu) fail(`interface ${spec.ifName} has MTU ${podLink.mtu}, expected ${spec.mtu}`);
        const addrs = (await pod.listAddresses({ link: podLink.index })).map((a) => `${a.ip}/${a.prefixLength}`);
        for (const family of new Set(spec.addresses.map((a) => a.family))) {
          const podRoutes = await pod.listRoutes({ family, table: RT_TABLE_MAIN });
          const hostRoutes = await host.listRoutes({ family, table: RT_TABLE_MAIN, link: hostLink.index });
          for (const a of spec.addresses.filter((x) => x.family === family)) {
            const prefix = hostPrefix(a);
            const gateway = canonicalIp(a.gateway);
            if (!addrs.includes(prefix)) fail(`address ${prefix} missing on ${spec.ifName}`);
            if (!podRoutes.some((r) => r.dst === 'default' && r.gateway === gateway)) {
              fail(`default route via ${a.gateway} missing in the pod`);
            }
            if (!hostRoutes.some((r) => r.dst === prefix)) fail(`host route to ${a.ip} via ${hostIf} missing`);
          }
        }
      });
    } finally {
      await pod.close();
    }
  }

  async verifyAttachment(rec: RecordedAttachment): Promise<AttachmentOwnership> {
    return attachmentOwnership(await this.host.get(), rec, classifyNetnsPath);
  }

  async listPodHostInterfaces(): Promise<string[]> {
    const host = await this.host.get();
    const links = await kernel(() => host.listLinks());
    // Only veths: a device of another kind that happens to carry an lxc name is nobody's pod.
    return links.filter((l) => l.kind === 'veth' && POD_HOST_IFNAME.test(l.name)).map((l) => l.name);
  }

  async removeHostInterface(name: string): Promise<void> {
    if (!POD_HOST_IFNAME.test(name)) throw new DatapathError('failed', `refusing to delete ${name}: not a pod host interface`);
    const host = await this.host.get();
    await kernel(() => deleteLinkIfPresent(host, name));
  }

  async podExists(containerId: string, ifName: string, hostIfName?: string): Promise<boolean> {
    const name = hostIfName ?? hostInterfaceName(containerId, ifName);
    validateInterfaceName(name);
    const host = await this.host.get();
    return (await kernel(() => host.findLink(name))) !== undefined;
  }
}
