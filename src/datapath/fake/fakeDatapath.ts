import { validateAbsolutePath, validateInterfaceName } from '../../cni/index.js';
import { hostInterfaceName, hostPrefix } from '../linux/links.js';
import {
  type AdoptedPodSpec,
  type AttachmentOwnership,
  type Datapath,
  DatapathError,
  type EndpointDatapathState,
  type NetnsKind,
  type NodeNetworkSpec,
  type PodAddress,
  type PodNetwork,
  type PodNetworkSpec,
  type PodTeardownSpec,
  type RecordedAttachment,
  type RoutingMode,
} from '../types.js';
import { FakeLoadBalancer, type FakeLoadBalancerOptions } from './fakeLoadBalancer.js';
import { FakeNodeRouting } from './fakeNodeRouting.js';

export { FakeLoadBalancer, type FakeLoadBalancerOptions, type FakeLoadBalancerOp } from './fakeLoadBalancer.js';
export { FakeNodeRouting, type FakeNodeRoutingOp } from './fakeNodeRouting.js';

/** The operations of the Datapath interface, for failure injection and gates. */
export type FakeDatapathOp = keyof Datapath;

interface FakeLink {
  readonly name: string;
  readonly index: number;
  readonly mac: string;
  mtu: number;
  up: boolean;
  proxyArp: boolean;
  /** Addresses as prefixes (`10.0.0.5/32`). */
  readonly addresses: Set<string>;
  /** The other end of a veth pair: namespace key and name. */
  peer?: { ns: string; name: string };
}

export interface FakeRoute {
  /** A prefix (`10.0.0.5/32`) or `default` (per family). */
  dst: string;
  dev: string;
  family: 4 | 6;
  gateway?: string;
  src?: string;
}

interface FakeNamespace {
  readonly links: Map<string, FakeLink>;
  routes: FakeRoute[];
}

/** Key of the node's own namespace in the fake's world. */
const NODE = '';
const HOST_IFNAME = /^lxc[0-9a-f]{12}$/;
const HOST_DEVICE = 'tendril_host';
const prefixOf = (ip: string) => hostPrefix({ ip });

/**
 * Calls of one operation wait at a gate until it is opened, so a test can
 * hold a regeneration (or teardown) in flight and act meanwhile.
 */
export class FakeGate {
  #arrived = 0;
  #open = false;
  #openWaiters: Array<() => void> = [];
  #arrivalWaiters: Array<{ n: number; resolve: () => void }> = [];

  /** Resolves once `n` calls have reached the gate (in total). */
  arrived(n = 1): Promise<void> {
    if (this.#arrived >= n) return Promise.resolve();
    return new Promise((resolve) => this.#arrivalWaiters.push({ n, resolve }));
  }

  get waiting(): number {
    return this.#open ? 0 : this.#arrived;
  }

  /** Lets every waiting and future call through. */
  open(): void {
    this.#open = true;
    for (const w of this.#openWaiters.splice(0)) w();
  }

  /** @internal called by the fake */
  async pass(): Promise<void> {
    this.#arrived++;
    this.#arrivalWaiters = this.#arrivalWaiters.filter((w) => {
      if (this.#arrived < w.n) return true;
      w.resolve();
      return false;
    });
    if (!this.#open) await new Promise<void>((resolve) => this.#openWaiters.push(resolve));
  }
}

export interface FakeDatapathOptions {
  /** Paths that name the node's own namespace (default: /proc/self/ns/net and /proc/1/ns/net). */
  nodeNetnsPaths?: string[];
  /** Interfaces the node has before tendril runs (e.g. its uplink `eth0`). */
  nodeLinks?: string[];
  /** Gives the fake an in-memory load balancer (as the eBPF datapath has); absent = services unsupported, as the routing datapath. */
  loadBalancer?: boolean | FakeLoadBalancerOptions;
  /** Mode of the in-memory node routing (`nodeRouting`); default tunnel. */
  routingMode?: RoutingMode;
}

/**
 * An in-memory datapath with the Linux datapath's observable behaviour:
 * namespaces that exist or not, veth pairs whose ends die together, routes
 * that need a local source address, `exists` / `not-found` / `netns-gone`
 * errors, idempotent teardown. `testing/contract.ts` runs the same suite
 * against it and the Linux datapath, so logic tested over the fake behaves
 * the same over the kernel. Tests add namespaces and FIFOs, break links and
 * routes behind the agent's back, inject failures and hold calls at gates.
 */
export class FakeDatapath implements Datapath {
  readonly nodeNetnsPaths: readonly string[];
  readonly #namespaces = new Map<string, FakeNamespace>();
  readonly #notNetns = new Set<string>();
  readonly #failures = new Map<FakeDatapathOp, Error[]>();
  readonly #gates = new Map<FakeDatapathOp, FakeGate>();
  readonly #synced = new Map<number, EndpointDatapathState>();
  #routerAddresses = new Set<string>();
  #masquerade: string[] = [];
  #nextIndex = 2;
  /** Every call in order, with the interface or endpoint it concerned. */
  readonly calls: Array<{ op: FakeDatapathOp; subject: string }> = [];
  /** Every regeneration (syncEndpoint) that succeeded, in order. */
  readonly syncs: EndpointDatapathState[] = [];
  /** The service maps, when the options asked for them. */
  readonly loadBalancer?: FakeLoadBalancer;
  /** Routes to other nodes' pod CIDRs, in memory. */
  readonly nodeRouting: FakeNodeRouting;

  constructor(options: FakeDatapathOptions = {}) {
    this.nodeNetnsPaths = options.nodeNetnsPaths ?? ['/proc/self/ns/net', '/proc/1/ns/net'];
    this.#namespaces.set(NODE, { links: new Map(), routes: [] });
    this.#newLink(NODE, 'lo', 65536);
    for (const name of options.nodeLinks ?? []) this.#newLink(NODE, name, 1500);
    if (options.loadBalancer) this.loadBalancer = new FakeLoadBalancer(options.loadBalancer === true ? {} : options.loadBalancer);
    this.nodeRouting = new FakeNodeRouting(options.routingMode ?? 'tunnel');
  }

  // ---- the test's side of the world ----------------------------------------

  /** Creates a network namespace at `path` (with `lo`), as `ip netns add` would. */
  addNetns(path: string): void {
    validateAbsolutePath(path, 'netns path');
    if (this.#namespaces.has(path) || this.nodeNetnsPaths.includes(path)) throw new Error(`fake: namespace ${path} exists`);
    this.#namespaces.set(path, { links: new Map(), routes: [] });
    this.#newLink(path, 'lo', 65536);
  }

  /** Destroys a namespace: its links go, and with them their veth peers on the node. */
  removeNetns(path: string): void {
    const ns = this.#namespaces.get(path);
    if (!ns || path === NODE) return;
    for (const name of [...ns.links.keys()]) this.#deleteLink(path, name);
    this.#namespaces.delete(path);
  }

  /** A path that exists but is no namespace (a FIFO, a plain file). */
  addNonNetnsFile(path: string): void {
    this.#notNetns.add(path);
  }

  /** A veth pair made by someone else (the granular API's caller). */
  createVethPair(hostIfName: string, netns: string, podIfName: string): void {
    const ns = this.#nsKey(netns);
    if (ns === undefined) throw new DatapathError('netns-gone', `fake: no namespace ${netns}`);
    if (this.#link(NODE, hostIfName) || this.#link(ns, podIfName)) throw new DatapathError('exists', 'fake: RTNETLINK answers: File exists');
    this.#vethPair(hostIfName, ns, podIfName, 1500);
  }

  /** Deletes a link behind the agent's back (`ip link del`); its veth peer goes with it. */
  deleteLink(name: string, netns?: string): void {
    const ns = netns === undefined ? NODE : this.#nsKey(netns);
    if (ns === undefined || !this.#link(ns, name)) throw new DatapathError('not-found', `fake: Cannot find device "${name}"`);
    this.#deleteLink(ns, name);
  }

  /** Deletes a host route behind the agent's back. */
  deleteHostRoute(prefix: string): void {
    const ns = this.#namespaces.get(NODE)!;
    ns.routes = ns.routes.filter((r) => r.dst !== prefix);
  }

  /** The node's routes (host routes to pods among them). */
  hostRoutes(): FakeRoute[] {
    return this.#namespaces.get(NODE)!.routes.map((r) => ({ ...r }));
  }

  /** Link names in a namespace (the node's when `netns` is omitted); undefined when it does not exist. */
  linkNames(netns?: string): string[] | undefined {
    const ns = netns === undefined ? NODE : this.#nsKey(netns);
    return ns === undefined ? undefined : [...this.#namespaces.get(ns)!.links.keys()].sort();
  }

  /** The node's router addresses and masquerade CIDRs, as the last setupNode left them. */
  node(): { routerAddresses: string[]; masqueradeCidrs: string[] } {
    return { routerAddresses: [...this.#routerAddresses].sort(), masqueradeCidrs: [...this.#masquerade] };
  }

  /** The state the endpoint's last regeneration put in force. */
  endpointState(id: number): EndpointDatapathState | undefined {
    return this.#synced.get(id);
  }

  /** The next call of `op` fails with `err` (queued: call twice to fail two calls). */
  failNext(op: FakeDatapathOp, err: Error = new DatapathError('failed', `fake: injected failure of ${op}`)): void {
    const list = this.#failures.get(op) ?? [];
    list.push(err);
    this.#failures.set(op, list);
  }

  /** Calls of `op` from now on wait at the returned gate until it is opened. */
  gate(op: FakeDatapathOp): FakeGate {
    const g = new FakeGate();
    this.#gates.set(op, g);
    return g;
  }

  /** Removes the gate of `op` (opening it, so nothing stays stuck). */
  ungate(op: FakeDatapathOp): void {
    this.#gates.get(op)?.open();
    this.#gates.delete(op);
  }

  // ---- Datapath ------------------------------------------------------------

  async setupNode(spec: NodeNetworkSpec): Promise<void> {
    await this.#enter('setupNode', HOST_DEVICE);
    if (!this.#link(NODE, HOST_DEVICE)) this.#vethPair(HOST_DEVICE, NODE, 'tendril_net', 1500);
    const host = this.#link(NODE, HOST_DEVICE)!;
    host.up = true;
    for (const a of spec.routerAddresses) {
      host.addresses.add(prefixOf(a.ip));
      this.#routerAddresses.add(a.ip);
    }
    this.#masquerade = [...spec.masqueradeCidrs];
  }

  async classifyNetns(path: string): Promise<NetnsKind> {
    await this.#enter('classifyNetns', path);
    if (this.nodeNetnsPaths.includes(path)) return 'node';
    if (this.#notNetns.has(path)) return 'not-netns';
    return this.#namespaces.has(path) && path !== NODE ? 'pod' : 'missing';
  }

  async preflightPod(spec: Pick<PodNetworkSpec, 'containerId' | 'netns' | 'ifName'>): Promise<void> {
    validateAbsolutePath(spec.netns, 'netns path');
    validateInterfaceName(spec.ifName);
    const ns = this.#nsKey(spec.netns);
    if (ns === undefined) throw new DatapathError('netns-gone', `network namespace ${spec.netns} does not exist`);
    if (this.#notNetns.has(spec.netns)) throw new DatapathError('failed', `${spec.netns} is not a network namespace`);
    this.#requireFreeOrOwn(ns, hostInterfaceName(spec.containerId, spec.ifName), spec);
  }

  /** As the Linux datapath: a pod interface that is not this attachment's own veth peer is someone else's. */
  #requireFreeOrOwn(ns: string, hostIf: string, spec: { netns: string; ifName: string }): void {
    const own = this.#link(NODE, hostIf);
    if (this.#link(ns, spec.ifName) && !(own?.peer?.ns === ns && own.peer.name === spec.ifName)) {
      throw new DatapathError('exists', `interface ${spec.ifName} already exists in ${spec.netns} and is not this attachment's: refusing to replace it`);
    }
  }

  async addPod(spec: PodNetworkSpec): Promise<PodNetwork> {
    validateAbsolutePath(spec.netns, 'netns path');
    validateInterfaceName(spec.ifName);
    const hostIf = hostInterfaceName(spec.containerId, spec.ifName);
    await this.#enter('addPod', hostIf);
    const ns = this.#nsKey(spec.netns);
    if (ns === undefined) throw new DatapathError('netns-gone', `network namespace ${spec.netns} does not exist`);
    if (this.#notNetns.has(spec.netns)) throw new DatapathError('failed', `${spec.netns} is not a network namespace`);
    // As the Linux datapath does: only this attachment's own leftover (an interrupted ADD) is
    // replaced, its host name with the peer; a pod interface that is not that peer is someone else's.
    this.#requireFreeOrOwn(ns, hostIf, spec);
    const leftover = this.#link(NODE, hostIf);
    if (leftover) this.#deleteLink(NODE, hostIf);
    const { host, pod } = this.#vethPair(hostIf, ns, spec.ifName, spec.mtu);
    try {
      pod.up = true;
      for (const a of spec.addresses) {
        pod.addresses.add(prefixOf(a.ip));
        this.#replaceRoute(ns, { dst: prefixOf(a.gateway), dev: spec.ifName, family: a.family });
        this.#replaceRoute(ns, { dst: 'default', dev: spec.ifName, family: a.family, gateway: a.gateway });
      }
      this.#hostSide(hostIf, spec.addresses);
    } catch (err) {
      this.#deleteLink(NODE, hostIf);
      throw err;
    }
    return { hostIfName: hostIf, hostIfIndex: host.index, hostMac: host.mac, podIfIndex: pod.index, podMac: pod.mac };
  }

  async removePod(spec: PodTeardownSpec): Promise<void> {
    validateInterfaceName(spec.ifName);
    const hostIf = spec.hostIfName ?? hostInterfaceName(spec.containerId, spec.ifName);
    validateInterfaceName(hostIf);
    await this.#enter('removePod', hostIf);
    if (spec.netns !== '') validateAbsolutePath(spec.netns, 'netns path');
    // The pod's end goes with the host end; nothing in the pod's namespace is deleted by name.
    if (this.#link(NODE, hostIf)) this.#deleteLink(NODE, hostIf);
  }

  podHostIfName(containerId: string, ifName: string): string {
    return hostInterfaceName(containerId, ifName);
  }

  async adoptPod(spec: AdoptedPodSpec): Promise<{ hostIfIndex: number; hostMac: string }> {
    validateInterfaceName(spec.hostIfName);
    validateInterfaceName(spec.ifName);
    validateAbsolutePath(spec.netns, 'netns path');
    await this.#enter('adoptPod', spec.hostIfName);
    const link = this.#link(NODE, spec.hostIfName);
    if (!link) throw new DatapathError('not-found', `host interface ${spec.hostIfName} does not exist`);
    // The Linux datapath's check, on the fake's veth model: a veth whose peer is ifName in the pod's namespace.
    const refuse = (why: string) => new DatapathError('refused', `refusing to adopt ${spec.hostIfName}: ${why}`);
    if (!link.peer) throw refuse('it is not a veth (a device without a driver kind, such as a physical one)');
    if (link.peer.ns === NODE) throw refuse('its veth peer is in the node\'s own namespace, not a pod\'s');
    const ns = this.#nsKey(spec.netns);
    if (ns === undefined) throw new DatapathError('netns-gone', `network namespace ${spec.netns} does not exist`);
    if (link.peer.ns !== ns) throw refuse(`its veth peer is not in ${spec.netns}`);
    if (link.peer.name !== spec.ifName) throw refuse(`its peer in ${spec.netns} is ${link.peer.name}, not ${spec.ifName}`);
    this.#hostSide(spec.hostIfName, spec.addresses);
    return { hostIfIndex: link.index, hostMac: link.mac };
  }

  async releaseAdoptedPod(spec: { hostIfName: string; addresses: PodAddress[] }): Promise<void> {
    validateInterfaceName(spec.hostIfName);
    await this.#enter('releaseAdoptedPod', spec.hostIfName);
    const ns = this.#namespaces.get(NODE)!;
    const gone = new Set(spec.addresses.map((a) => prefixOf(a.ip)));
    ns.routes = ns.routes.filter((r) => !(r.dev === spec.hostIfName && gone.has(r.dst)));
  }

  async syncEndpoint(state: EndpointDatapathState): Promise<void> {
    validateInterfaceName(state.hostIfName);
    await this.#enter('syncEndpoint', String(state.id));
    if (!this.#link(NODE, state.hostIfName)) throw new DatapathError('not-found', `host interface ${state.hostIfName} of endpoint ${state.id} does not exist`);
    this.#hostSide(state.hostIfName, state.addresses);
    const copy: EndpointDatapathState = { ...state, addresses: state.addresses.map((a) => ({ ...a })), policy: { ...state.policy, entries: [...state.policy.entries] } };
    this.#synced.set(state.id, copy);
    this.syncs.push(copy);
  }

  async checkPod(spec: PodNetworkSpec): Promise<void> {
    validateAbsolutePath(spec.netns, 'netns path');
    const hostIf = hostInterfaceName(spec.containerId, spec.ifName);
    await this.#enter('checkPod', hostIf);
    const fail = (msg: string): never => {
      throw new DatapathError('not-found', msg);
    };
    const ns = this.#nsKey(spec.netns);
    if (ns === undefined) return fail(`network namespace ${spec.netns} does not exist`);
    const host = this.#link(NODE, hostIf);
    if (!host?.up) fail(`host interface ${hostIf} is missing or down`);
    const pod = this.#link(ns, spec.ifName);
    if (!pod?.up) return fail(`interface ${spec.ifName} is missing or down in ${spec.netns}`);
    if (pod.mtu !== spec.mtu) fail(`interface ${spec.ifName} has MTU ${pod.mtu}, expected ${spec.mtu}`);
    const podRoutes = this.#namespaces.get(ns)!.routes;
    const hostRoutes = this.#namespaces.get(NODE)!.routes;
    for (const a of spec.addresses) {
      if (!pod.addresses.has(prefixOf(a.ip))) fail(`address ${prefixOf(a.ip)} missing on ${spec.ifName}`);
      if (!podRoutes.some((r) => r.dst === 'default' && r.family === a.family && r.gateway === a.gateway)) fail(`default route via ${a.gateway} missing in the pod`);
      if (!hostRoutes.some((r) => r.dst === prefixOf(a.ip) && r.dev === hostIf)) fail(`host route to ${a.ip} via ${hostIf} missing`);
    }
  }

  async podExists(containerId: string, ifName: string, hostIfName?: string): Promise<boolean> {
    const name = hostIfName ?? hostInterfaceName(containerId, ifName);
    await this.#enter('podExists', name);
    return this.#link(NODE, name) !== undefined;
  }

  /** The Linux datapath's rule (attachmentOwnership.ts) on the fake's veth model. */
  async verifyAttachment(rec: RecordedAttachment): Promise<AttachmentOwnership> {
    await this.#enter('verifyAttachment', rec.hostIfName);
    const foreign = (why: string): AttachmentOwnership => ({ kind: 'foreign', reason: `the record names host interface ${rec.hostIfName}, ${why}` });
    const derived = hostInterfaceName(rec.containerId, rec.ifName);
    if (!rec.adopted && rec.hostIfName !== derived) return foreign(`not ${derived}, the one derived from container ${rec.containerId} interface ${rec.ifName}`);
    const link = this.#link(NODE, rec.hostIfName);
    if (!link) return { kind: 'gone' };
    if (!link.peer) return foreign('which is not a veth (a device without a driver kind, such as a physical one)');
    if (link.peer.ns === NODE) return foreign('whose veth peer is in the node\'s own namespace, not a pod\'s');
    const kind = rec.netns === '' ? 'missing' : await this.classifyNetns(rec.netns);
    if (kind === 'node') return foreign(`and ${rec.netns} is the node's own namespace, not a pod's`);
    if (kind === 'not-netns' || kind === 'unmounted') return foreign(`and ${rec.netns} is not a network namespace`);
    const owned: AttachmentOwnership = { kind: 'owned', hostIfIndex: link.index, hostMac: link.mac };
    if (kind === 'missing') return rec.adopted ? foreign(`and its pod's namespace ${rec.netns || '(none recorded)'} is gone, so its peer cannot be checked`) : owned;
    if (link.peer.ns !== this.#nsKey(rec.netns)) return foreign(`whose veth peer is not in ${rec.netns}`);
    if (link.peer.name !== rec.ifName) return foreign(`whose peer in ${rec.netns} is ${link.peer.name}, not ${rec.ifName}`);
    return owned;
  }

  async listPodHostInterfaces(): Promise<string[]> {
    await this.#enter('listPodHostInterfaces', '');
    return [...this.#namespaces.get(NODE)!.links.keys()].filter((n) => HOST_IFNAME.test(n));
  }

  async removeHostInterface(name: string): Promise<void> {
    if (!HOST_IFNAME.test(name)) throw new DatapathError('failed', `refusing to delete ${name}: not a pod host interface`);
    await this.#enter('removeHostInterface', name);
    if (this.#link(NODE, name)) this.#deleteLink(NODE, name);
  }

  // ---- internals -------------------------------------------------------------

  /** Records the call, waits at its gate, then throws an injected failure if one is queued. */
  async #enter(op: FakeDatapathOp, subject: string): Promise<void> {
    this.calls.push({ op, subject });
    await this.#gates.get(op)?.pass();
    const err = this.#failures.get(op)?.shift();
    if (err) throw err;
  }

  /** The namespace a path names: the node's for the node's own paths, as the kernel would. */
  #nsKey(path: string): string | undefined {
    if (this.nodeNetnsPaths.includes(path)) return NODE;
    return path !== NODE && this.#namespaces.has(path) ? path : undefined;
  }

  #link(ns: string, name: string): FakeLink | undefined {
    return this.#namespaces.get(ns)?.links.get(name);
  }

  #newLink(ns: string, name: string, mtu: number): FakeLink {
    const index = this.#nextIndex++;
    const mac = `02:fa:ce:${((index >> 16) & 0xff).toString(16).padStart(2, '0')}:${((index >> 8) & 0xff).toString(16).padStart(2, '0')}:${(index & 0xff).toString(16).padStart(2, '0')}`;
    const link: FakeLink = { name, index, mac, mtu, up: name === 'lo', proxyArp: false, addresses: new Set() };
    this.#namespaces.get(ns)!.links.set(name, link);
    return link;
  }

  #vethPair(hostName: string, podNs: string, podName: string, mtu: number): { host: FakeLink; pod: FakeLink } {
    const host = this.#newLink(NODE, hostName, mtu);
    const pod = this.#newLink(podNs, podName, mtu);
    host.peer = { ns: podNs, name: podName };
    pod.peer = { ns: NODE, name: hostName };
    return { host, pod };
  }

  /** Deletes a link, its routes, and its veth peer (and the peer's routes). */
  #deleteLink(ns: string, name: string): void {
    const space = this.#namespaces.get(ns)!;
    const link = space.links.get(name);
    if (!link) return;
    space.links.delete(name);
    space.routes = space.routes.filter((r) => r.dev !== name);
    if (link.peer) {
      const other = this.#namespaces.get(link.peer.ns);
      if (other?.links.get(link.peer.name)?.peer?.name === name) this.#deleteLink(link.peer.ns, link.peer.name);
    }
  }

  #replaceRoute(ns: string, route: FakeRoute): void {
    const space = this.#namespaces.get(ns)!;
    if (!space.links.has(route.dev)) throw new DatapathError('not-found', `Cannot find device "${route.dev}"`);
    space.routes = space.routes.filter((r) => !(r.dst === route.dst && r.family === route.family));
    space.routes.push(route);
  }

  /** Proxy ARP, link up and a host route per address with the gateway as source, which must be a local address. */
  #hostSide(hostIf: string, addresses: readonly PodAddress[]): void {
    const link = this.#link(NODE, hostIf);
    if (!link) throw new DatapathError('not-found', `Cannot find device "${hostIf}"`);
    for (const a of addresses) {
      if (!this.#routerAddresses.has(a.gateway)) throw new DatapathError('failed', `route ${prefixOf(a.ip)} src ${a.gateway}: Invalid prefsrc address`);
    }
    link.proxyArp = true;
    link.up = true;
    for (const a of addresses) this.#replaceRoute(NODE, { dst: prefixOf(a.ip), dev: hostIf, family: a.family, src: a.gateway });
  }
}
