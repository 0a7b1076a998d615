/**
 * The node's routes to other nodes' pod CIDRs, one per CIDR:
 * - native: `<cidr> via <node IP>`; the kernel finds the device (the node IP
 *   must be reachable on the underlay: a flat L2/L3 network). An IPv6 pod
 *   CIDR goes via the node's IPv6 address (the kernel cannot route IPv6 via
 *   an IPv4 gateway without extra nexthop objects), and is left out when the
 *   node has none;
 * - tunnel: `<cidr> via 169.254.42.2 onlink dev tendril_host src <router>`,
 *   the ClusterIP routes' next hop: what the node itself sends to a remote
 *   pod reaches tendril_host's egress program, which encapsulates it to the
 *   node the ipcache names. The router address as source brings the reply
 *   back to an address the datapath knows as the host. An IPv6 pod CIDR the
 *   same, via the IPv6 next hop (fe80::a9fe:2a02) and the IPv6 router
 *   address, once this node has one (an IPv6 pod CIDR of its own).
 * Every route carries rtm_protocol NODE_ROUTE_PROTOCOL, so a restarted agent
 * finds its own (and only its own) to prune; deletes name the protocol, so
 * a route someone else made to the same CIDR is never deleted. A restarted
 * agent leaves a route it finds exactly as it would write it alone: an IPv6
 * route "replaced" by an equal one is swapped in anew and announced.
 */
import { Serializer } from '../../async/keyedSerializer.js';
import type { Logger } from '../../logging/logger.js';
import { formatIp, formatPrefix, tryParseIp, tryParsePrefix } from '../../netip/index.js';
import { isKernelError } from '../kernel/errors.js';
import { type LinkRouteSpec, type Netlink, type Route, RT_TABLE_MAIN, RTN_UNICAST } from '../kernel/netlink/index.js';
import { DatapathError, isDatapathError, type NodeRoutingDatapath, type RemoteNodeRoute, type RoutingMode } from '../types.js';
import { HOST_DEVICE, HOST_PEER_DEVICE } from './hostDevice.js';
import { ensureHostNextHop, hostNextHop } from './hostNextHop.js';
import { kernel, toDatapathError } from './kernel.js';
import { canonicalIp } from './links.js';

/** rtm_protocol of tendril's routes to other nodes' pod CIDRs (unassigned in rt_protos; services use 211). */
export const NODE_ROUTE_PROTOCOL = 212;
/** The metric a route written without one gets, per family. */
const DEFAULT_METRIC = { 4: 0, 6: 1024 } as const;

export interface RemoteNodeRoutesOptions {
  mode: RoutingMode;
  /** Netlink in the agent's namespace (where the routes go). */
  netlink: () => Promise<Netlink>;
  log: Logger;
  /** Tunnel mode: the device the routes go to (tendril_host unless given)... */
  hostDevice?: string;
  /** ...and its peer, whose MAC the next hop's neighbour entry gets (tendril_net unless given). */
  hostPeerDevice?: string;
}

export class RemoteNodeRoutes implements NodeRoutingDatapath {
  readonly mode: RoutingMode;
  /** Each node's routes as last asked for (the CIDRs that get a route, canonical). */
  readonly #nodes = new Map<string, RemoteNodeRoute>();
  /**
   * CIDR → the nodes claiming it, oldest first. Two nodes claim one CIDR only
   * in passing (a block moving between nodes, a replayed watch): the route
   * goes to the newest claim, and back to the older one when it lets go.
   */
  readonly #claims = new Map<string, string[]>();
  /** Tunnel mode: the routes' source, per family; until a family's is known its routes are only recorded. */
  readonly #routers = new Map<4 | 6, string>();
  #devIndex: number | undefined;
  readonly #dev: string;
  readonly #peer: string;
  /** Calls run one at a time: each reads and changes the claims across kernel round trips. */
  readonly #serial = new Serializer();
  /**
   * Routes of ours the kernel held when this run first installed one, by
   * destination (read once then); each is consulted by the first install of
   * its CIDR only, so a later write always goes to the kernel.
   */
  #foundAtStart: Map<string, Route> | undefined;

  constructor(private readonly opts: RemoteNodeRoutesOptions) {
    this.mode = opts.mode;
    this.#dev = opts.hostDevice ?? HOST_DEVICE;
    this.#peer = opts.hostPeerDevice ?? HOST_PEER_DEVICE;
  }

  /**
   * A router address is known (setupNode, once per family). Tunnel mode:
   * that family's next hop's neighbour entry goes in (also with no service)
   * and every route recorded so far is put in force. Native mode needs no
   * source: nothing to do.
   */
  setRouter(ip: string): Promise<void> {
    return this.#serial.run(async () => {
      if (this.mode !== 'tunnel') return;
      const parsed = tryParseIp(ip);
      if (parsed === undefined) throw new DatapathError('failed', `router address ${JSON.stringify(ip)} is not an IP address`);
      this.#devIndex = await ensureHostNextHop(await this.opts.netlink(), this.#dev, this.#peer, parsed.family);
      this.#routers.set(parsed.family, formatIp(parsed));
      await this.#installAll([...this.#claims.keys()]);
    });
  }

  remoteNodes(): ReadonlyMap<string, RemoteNodeRoute> {
    return new Map(this.#nodes);
  }

  upsertRemoteNode(node: RemoteNodeRoute): Promise<void> {
    return this.#serial.run(async () => {
      const wanted = this.#normalize(node);
      const previous = this.#nodes.get(node.name);
      this.#nodes.set(node.name, wanted);
      const dropped = (previous?.podCidrs ?? []).filter((c) => !wanted.podCidrs.includes(c));
      for (const cidr of wanted.podCidrs) {
        const claims = this.#claims.get(cidr) ?? [];
        if (!claims.includes(node.name)) this.#claims.set(cidr, [...claims, node.name]);
      }
      await this.#settle([...this.#release(node.name, dropped), ...wanted.podCidrs]);
      this.opts.log.debug({ node: node.name, nodeIp: wanted.nodeIp, podCidrs: wanted.podCidrs, mode: this.mode }, 'routes to a remote node\'s pods');
    });
  }

  removeRemoteNode(name: string): Promise<void> {
    return this.#serial.run(async () => {
      const previous = this.#nodes.get(name);
      if (!previous) return;
      this.#nodes.delete(name);
      await this.#settle(this.#release(name, previous.podCidrs));
      this.opts.log.debug({ node: name, podCidrs: previous.podCidrs }, 'removed the routes to a remote node\'s pods');
    });
  }

  pruneRemoteNodes(live: readonly string[]): Promise<void> {
    return this.#serial.run(async () => {
      const keep = new Set(live);
      const gone = [...this.#nodes.keys()].filter((name) => !keep.has(name));
      const released: string[] = [];
      for (const name of gone) {
        released.push(...this.#release(name, this.#nodes.get(name)!.podCidrs));
        this.#nodes.delete(name);
      }
      await this.#settle(released);
      // Routes of ours in the kernel to CIDRs no node claims: a previous run's (or another mode's).
      const nl = await this.opts.netlink();
      const routes = [...(await kernel(() => nl.listRoutes({ family: 4, table: RT_TABLE_MAIN }))), ...(await kernel(() => nl.listRoutes({ family: 6, table: RT_TABLE_MAIN })))];
      const stale = [...new Set(routes.filter((r) => r.protocol === NODE_ROUTE_PROTOCOL && !this.#claims.has(r.dst)).map((r) => r.dst))];
      await this.#settle(stale);
      if (gone.length > 0 || stale.length > 0) this.opts.log.info({ nodes: gone, routes: stale }, 'removed routes to pods of nodes that are gone');
    });
  }

  /**
   * CIDRs in canonical form, those that can get a route: native, a family
   * the node has an address of (its next hop); tunnel, every family whatever
   * the node's address family (the route leads into tendril_host, whose
   * program encapsulates to the endpoint the ipcache names, over an IPv4 or
   * an IPv6 underlay, or drops the packet when it names none). `nodeIp` is
   * the IPv4 address, or the IPv6 one of a node that has no IPv4 address at all.
   */
  #normalize(node: RemoteNodeRoute): RemoteNodeRoute {
    const primary = tryParseIp(node.nodeIp);
    if (primary === undefined) throw new DatapathError('failed', `node ${node.name}: node IP ${JSON.stringify(node.nodeIp)} is not an IP address`);
    const given6 = node.nodeIp6 === undefined ? undefined : tryParseIp(node.nodeIp6);
    if (node.nodeIp6 !== undefined && (given6?.family !== 6 || primary.family !== 4)) {
      throw new DatapathError('failed', `node ${node.name}: IPv6 node IP ${JSON.stringify(node.nodeIp6)} is not an IPv6 address next to an IPv4 node IP`);
    }
    const ip4 = primary.family === 4 ? primary : undefined;
    const ip6 = primary.family === 6 ? primary : given6;
    const cidrs: string[] = [];
    for (const text of node.podCidrs) {
      const p = tryParsePrefix(text, { hostBits: 'mask' });
      if (p === undefined) throw new DatapathError('failed', `node ${node.name}: pod CIDR ${JSON.stringify(text)} is not a CIDR`);
      // Tunnel mode: every family (the ipcache names each pod's tunnel endpoint, over either underlay).
      const reachable = this.mode === 'tunnel' || (p.family === 4 ? ip4 !== undefined : ip6 !== undefined);
      if (!reachable) {
        // The node's pods of the other family still get their routes.
        this.opts.log.debug({ node: node.name, cidr: text, mode: this.mode }, 'no route to a pod CIDR of a remote node (no node address of its family, or IPv6 in tunnel mode)');
        continue;
      }
      const canonical = formatPrefix(p);
      if (!cidrs.includes(canonical)) cidrs.push(canonical);
    }
    return { name: node.name, nodeIp: formatIp(primary), ...(ip4 !== undefined && ip6 !== undefined ? { nodeIp6: formatIp(ip6) } : {}), podCidrs: cidrs };
  }

  /** Takes `name`'s claims on `cidrs` back; answers them (their routes must be settled again). */
  #release(name: string, cidrs: readonly string[]): string[] {
    for (const cidr of cidrs) {
      const rest = (this.#claims.get(cidr) ?? []).filter((n) => n !== name);
      if (rest.length > 0) this.#claims.set(cidr, rest);
      else this.#claims.delete(cidr);
    }
    return [...cidrs];
  }

  /**
   * Puts each CIDR's route in the state its claims say: to the newest
   * claimant, or gone. Every CIDR is tried; the first failure is thrown
   * after (a later call for the node converges the rest).
   */
  async #settle(cidrs: readonly string[]): Promise<void> {
    const unclaimed = cidrs.filter((c) => !this.#claims.has(c));
    const claimed = cidrs.filter((c) => this.#claims.has(c));
    let first: unknown;
    for (const cidr of new Set(unclaimed)) {
      try {
        await this.#delete(cidr);
      } catch (err) {
        first ??= err;
      }
    }
    try {
      await this.#installAll(claimed);
    } catch (err) {
      first ??= err;
    }
    if (first !== undefined) throw first;
  }

  async #installAll(cidrs: readonly string[]): Promise<void> {
    let first: unknown;
    for (const cidr of new Set(cidrs)) {
      const claims = this.#claims.get(cidr);
      const owner = claims && this.#nodes.get(claims[claims.length - 1]!);
      if (!owner) continue;
      const spec = this.#routeTo(cidr, owner);
      if (!spec) continue;
      try {
        const nl = await this.opts.netlink();
        const found = await this.#routesFoundAtStart(nl);
        const held = found.get(cidr);
        found.delete(cidr);
        if (held !== undefined && this.#isInForce(held, spec)) continue;
        await kernel(() => nl.replaceRoute(spec));
      } catch (err) {
        first ??= new DatapathError(isDatapathError(err, 'not-found') ? 'not-found' : 'failed', `route to ${cidr} (pods of node ${owner.name}) failed: ${(err as Error).message}`, [], '', { cause: err });
      }
    }
    if (first !== undefined) throw first;
  }

  async #routesFoundAtStart(nl: Netlink): Promise<Map<string, Route>> {
    if (this.#foundAtStart === undefined) {
      const routes = await Promise.all(([4, 6] as const).map((family) => kernel(() => nl.listRoutes({ family, table: RT_TABLE_MAIN }))));
      this.#foundAtStart = new Map(routes.flat().filter((r) => r.protocol === NODE_ROUTE_PROTOCOL).map((r) => [r.dst, r]));
    }
    return this.#foundAtStart;
  }

  /** Whether the kernel's route is the one `spec` writes (its device too when the spec names one; else the kernel picks it). */
  #isInForce(route: Route, spec: LinkRouteSpec): boolean {
    const device = spec.link === undefined || route.oif === (typeof spec.link === 'number' ? spec.link : this.#devIndex);
    return (
      route.type === RTN_UNICAST &&
      route.gateway === (spec.gateway === undefined ? undefined : canonicalIp(spec.gateway)) &&
      route.prefsrc === (spec.prefsrc === undefined ? undefined : canonicalIp(spec.prefsrc)) &&
      route.onlink === (spec.onlink === true) &&
      (route.priority ?? 0) === DEFAULT_METRIC[route.family] &&
      device
    );
  }

  /** The route for `cidr` to `node`; undefined in tunnel mode until the router address of its family is known. */
  #routeTo(cidr: string, node: RemoteNodeRoute): LinkRouteSpec | undefined {
    if (this.mode === 'native') {
      const v6 = cidr.includes(':');
      // nodeIp is the IPv6 address itself on a node without IPv4.
      const gateway = v6 ? (node.nodeIp6 ?? (node.nodeIp.includes(':') ? node.nodeIp : undefined)) : node.nodeIp.includes(':') ? undefined : node.nodeIp;
      return gateway === undefined ? undefined : { dst: cidr, gateway, protocol: NODE_ROUTE_PROTOCOL };
    }
    const family = cidr.includes(':') ? 6 : 4;
    const router = this.#routers.get(family);
    if (router === undefined) return undefined;
    return { dst: cidr, gateway: hostNextHop(family), onlink: true, link: this.#devIndex ?? this.#dev, prefsrc: router, protocol: NODE_ROUTE_PROTOCOL };
  }

  async #delete(cidr: string): Promise<void> {
    const nl = await this.opts.netlink();
    try {
      await nl.deleteRoute({ dst: cidr, table: RT_TABLE_MAIN, protocol: NODE_ROUTE_PROTOCOL });
    } catch (err) {
      // Not there (never installed, or removed with its device): the goal is reached.
      if (isKernelError(err, 'ESRCH', 'ENOENT', 'ENODEV')) return;
      throw toDatapathError(err);
    }
  }
}
