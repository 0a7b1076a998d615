/**
 * The node's routes to service frontends (ClusterIPs, external and
 * LoadBalancer IPs): each such /32 (or IPv6 /128) goes to tendril_host,
 * whose egress program load-balances what the node itself sends to a
 * service; the preferred source is the router address of the frontend's
 * family, so a backend's reply comes back to an address the datapath knows
 * as the host. A family without a router address (no pod CIDR of it) gets
 * no routes: its frontends are only recorded.
 *
 * The routes go through one next hop per family on tendril_host with a
 * permanent neighbour entry (tendril_net's MAC): a plain link route would
 * make the kernel ARP (or solicit) for every ClusterIP on tendril_host,
 * nobody answers, and the packet never reaches the program (tc egress runs
 * after neighbour resolution). Our routes carry their own rtm_protocol, so
 * a restart tells them from anyone else's.
 */
import type { Logger } from '../../logging/logger.js';
import { isKernelError } from '../kernel/errors.js';
import { type Netlink, NetlinkBatch, RT_TABLE_MAIN, RTN_UNICAST } from '../kernel/netlink/index.js';
import { HOST_DEVICE, HOST_PEER_DEVICE } from '../linux/hostDevice.js';
import { ensureHostNextHop, HOST_NEXTHOP, hostNextHop } from '../linux/hostNextHop.js';
import { canonicalIp } from '../linux/links.js';
import { kernel, toDatapathError } from '../linux/kernel.js';
import { DatapathError } from '../types.js';
import { ipFamilyOf, type IpFamily } from '../../netip/index.js';

/** What an IPv6 route without a metric gets (IPv4's is 0). */
const IPV6_DEFAULT_METRIC = 1024;
/** rtm_protocol of tendril's service routes (unassigned in rt_protos). */
export const SERVICE_ROUTE_PROTOCOL = 211;
/** The next hop IPv4 ClusterIP routes use on tendril_host (link-local, never a real host; shared with the tunnel-mode node routes); IPv6's is HOST_NEXTHOP6. */
export const SERVICE_ROUTE_NEXTHOP = HOST_NEXTHOP;

/** A frontend's family (an address some service holds is a valid IP). */
function familyOf(address: string): IpFamily {
  return ipFamilyOf(address) === 6 ? 6 : 4;
}

function hostRoute(address: string): string {
  return `${address}/${familyOf(address) === 4 ? 32 : 128}`;
}

export interface ServiceRoutesOptions {
  netlink: () => Promise<Netlink>;
  log: Logger;
  /** The device routes go to (tendril_host unless given) and its peer, whose MAC the next hop gets. */
  hostDevice?: string;
  hostPeerDevice?: string;
}

export class ServiceRoutes {
  /** ClusterIP → the services that hold it. */
  readonly #holders = new Map<string, Set<number>>();
  /** Addresses whose route is in the kernel (as this process put or found it). */
  readonly #installed = new Set<string>();
  /** Inside deferInstalls: addresses whose route goes in when it returns. */
  #deferred: Set<string> | undefined;
  /** The router address of each family known so far (the routes' source). */
  readonly #routers = new Map<IpFamily, string>();
  /** tendril_host's ifindex, resolved with the router address: one lookup, not one per route. */
  #devIndex: number | undefined;
  readonly #dev: string;
  readonly #peer: string;

  constructor(private readonly opts: ServiceRoutesOptions) {
    this.#dev = opts.hostDevice ?? HOST_DEVICE;
    this.#peer = opts.hostPeerDevice ?? HOST_PEER_DEVICE;
  }

  /** Addresses some service holds. */
  addresses(): string[] {
    return [...this.#holders.keys()];
  }

  /** Records that `id` holds `address` without touching the kernel (state found in the maps at start). */
  adopt(id: number, address: string): void {
    this.#holdersOf(address).add(id);
  }

  #holdersOf(address: string): Set<number> {
    let s = this.#holders.get(address);
    if (!s) this.#holders.set(address, (s = new Set()));
    return s;
  }

  /**
   * A router address is known (setupNode, once per family): that family's
   * next hop goes in and every route of the family held so far is put in
   * force. Until then its routes are only recorded.
   */
  async setRouter(router: string): Promise<void> {
    const family = ipFamilyOf(router);
    if (family === 0) throw new DatapathError('failed', `router address ${JSON.stringify(router)} is not an IP address`);
    const nl = await this.opts.netlink();
    this.#devIndex = await ensureHostNextHop(nl, this.#dev, this.#peer, family);
    this.#routers.set(family, router);
    // A restart finds the routes of the services it adopted in force: those are left alone. An
    // IPv6 route "replaced" by an equal one is not (as an IPv4 one is): the kernel swaps in a new
    // route and announces it, so a restart would rewrite every IPv6 ClusterIP's route.
    const inForce = await this.#inForce(nl, family, router);
    for (const address of this.#holders.keys()) {
      if (familyOf(address) !== family) continue;
      if (inForce.has(hostRoute(address))) this.#installed.add(address);
      else await this.#install(address);
    }
  }

  /** The destinations of `family` whose route on the device is exactly the one #install writes. */
  async #inForce(nl: Netlink, family: IpFamily, router: string): Promise<Set<string>> {
    const routes = await kernel(() => nl.listRoutes({ family, table: RT_TABLE_MAIN, link: this.#devIndex ?? this.#dev }));
    const gateway = canonicalIp(hostNextHop(family));
    const prefsrc = canonicalIp(router);
    const metric = family === 6 ? IPV6_DEFAULT_METRIC : 0;
    return new Set(
      routes
        .filter((r) => r.protocol === SERVICE_ROUTE_PROTOCOL && r.gateway === gateway && r.prefsrc === prefsrc && r.oif === this.#devIndex && r.onlink && r.type === RTN_UNICAST && (r.priority ?? 0) === metric)
        .map((r) => r.dst),
    );
  }

  /**
   * Routes held while `fn` runs are installed together when it returns, a
   * netlink batch of 256 a round trip (10,000 ClusterIPs: 40 round trips,
   * not 10,000). Throws, after `fn`'s own outcome, when any of them failed:
   * their holders stay recorded, and the caller undoes what it wrote.
   */
  async deferInstalls<T>(fn: () => Promise<T>): Promise<T> {
    if (this.#deferred) return fn();
    const deferred = (this.#deferred = new Set());
    let result: T;
    try {
      result = await fn();
    } finally {
      this.#deferred = undefined;
      await this.#installMany([...deferred].filter((a) => this.#holders.has(a)));
    }
    return result;
  }

  async #installMany(addresses: readonly string[]): Promise<void> {
    const ready = addresses.filter((a) => this.#routers.has(familyOf(a)));
    if (ready.length === 0) return;
    const nl = await this.opts.netlink();
    const batch = new NetlinkBatch();
    for (const address of ready) {
      const family = familyOf(address);
      batch.replaceRoute({ dst: hostRoute(address), gateway: hostNextHop(family), onlink: true, oif: this.#devIndex!, prefsrc: this.#routers.get(family)!, protocol: SERVICE_ROUTE_PROTOCOL });
    }
    const outcomes = await kernel(() => nl.applyEach(batch));
    const failed: string[] = [];
    outcomes.forEach((err, i) => {
      if (err === undefined) this.#installed.add(ready[i]!);
      else failed.push(`${ready[i]}: ${err.message}`);
    });
    if (failed.length > 0) throw new DatapathError('failed', `routes to ${failed.length} service frontends could not be installed (${failed.slice(0, 3).join('; ')}${failed.length > 3 ? '; …' : ''})`);
  }

  /** `id` holds a route to `address` (in force once the router address is known; inside deferInstalls, when it returns). */
  async hold(id: number, address: string): Promise<void> {
    const holders = this.#holdersOf(address);
    holders.add(id);
    if (!this.#routers.has(familyOf(address))) return;
    if (this.#deferred) {
      this.#deferred.add(address);
      return;
    }
    try {
      await this.#install(address);
    } catch (err) {
      holders.delete(id);
      if (holders.size === 0) this.#holders.delete(address);
      throw err;
    }
  }

  /** `id` no longer holds `address`: the route goes with its last holder. */
  async release(id: number, address: string): Promise<void> {
    const holders = this.#holders.get(address);
    if (!holders?.delete(id) || holders.size > 0) return;
    this.#holders.delete(address);
    await this.#remove(address);
  }

  async #install(address: string): Promise<void> {
    const family = familyOf(address);
    const router = this.#routers.get(family);
    if (router === undefined) return;
    const nl = await this.opts.netlink();
    await kernel(() =>
      nl.replaceRoute({ dst: hostRoute(address), gateway: hostNextHop(family), onlink: true, link: this.#devIndex ?? this.#dev, prefsrc: router, protocol: SERVICE_ROUTE_PROTOCOL }),
    );
    this.#installed.add(address);
  }

  async #remove(address: string, found = false): Promise<void> {
    // Nothing was put in force yet (no router address): a previous run's route goes with prune().
    if (!this.#installed.delete(address) && !this.#routers.has(familyOf(address)) && !found) return;
    const nl = await this.opts.netlink();
    try {
      await nl.deleteRoute({ dst: hostRoute(address), link: this.#devIndex ?? this.#dev, protocol: SERVICE_ROUTE_PROTOCOL });
    } catch (err) {
      // Gone already (the device was recreated, someone deleted it): nothing to do.
      if (!isKernelError(err, 'ESRCH', 'ENODEV', 'ENOENT')) throw toDatapathError(err);
    }
  }

  /** Deletes our routes on the device to addresses no service holds (a previous run's); answers them. */
  async prune(): Promise<string[]> {
    const nl = await this.opts.netlink();
    let routes;
    try {
      routes = [...(await nl.listRoutes({ family: 4, link: this.#dev })), ...(await nl.listRoutes({ family: 6, link: this.#dev }))];
    } catch (err) {
      if (isKernelError(err, 'ENODEV')) return [];
      throw err;
    }
    const removed: string[] = [];
    for (const r of routes) {
      const slash = r.dst.indexOf('/');
      const address = r.dst.slice(0, slash);
      if (r.protocol !== SERVICE_ROUTE_PROTOCOL || slash < 0 || r.dst !== hostRoute(address)) continue;
      if (this.#holders.has(address)) continue;
      await this.#remove(address, true);
      removed.push(address);
    }
    if (removed.length > 0) this.opts.log.info({ removed }, 'removed routes to ClusterIPs no service holds');
    return removed;
  }
}
