import { Backoff } from '../async/backoff.js';
import type { Logger } from '../logging/logger.js';
import { ReservedIdentity } from '../identity/constants.js';
import { KeyedSerializer } from '../async/keyedSerializer.js';
import type { IPCache } from '../ipcache/ipcache.js';
import { IpcacheSource } from '../ipcache/source.js';
import { formatPrefix, hostPrefix, tryParseIp } from '../netip/index.js';
import type { NodeRoutingDatapath, RemoteNodeRoute } from '../datapath/types.js';
import { nodeIpOfFamily, primaryNodeIp } from './nodeRecord.js';
import type { NodeRecord, NodeRegistryView } from './types.js';

export interface RemoteNodesOptions {
  registry: NodeRegistryView;
  nodeName: string;
  ipcache: IPCache;
  /** Routes to other nodes' pod CIDRs; absent: ipcache entries only (a datapath without node routing). */
  routing?: NodeRoutingDatapath;
  logger?: Logger;
  /** First retry delay of a failed route install (doubles up to 5 s). */
  retryMs?: number;
}

/** Owner of a remote node's addresses in this node's ipcache (the same owner its kvstore entries carry). */
export function remoteNodeOwner(name: string): string {
  return `node:${name}`;
}

const MAX_RETRY_MS = 5000;

/** What is in force for one remote node. */
interface Installed {
  /** Host prefixes of its addresses in the ipcache. */
  prefixes: Set<string>;
  /** The route last installed, or undefined when none is (or the last call failed). */
  route: RemoteNodeRoute | undefined;
  /** Ipcache and routes match the registry's record. */
  complete: boolean;
}

function sameRoute(a: RemoteNodeRoute | undefined, b: RemoteNodeRoute): boolean {
  return a !== undefined && a.nodeIp === b.nodeIp && a.nodeIp6 === b.nodeIp6 && a.podCidrs.length === b.podCidrs.length && a.podCidrs.every((c, i) => c === b.podCidrs[i]);
}

/**
 * Turns the registry's other nodes into this node's state: each of their
 * addresses in the ipcache as identity remote-node with the node's InternalIP
 * as tunnel endpoint (so pod → remote node traffic and replies to a remote
 * router address go through the tunnel), and the datapath's routes to their
 * pod CIDRs. A node that leaves the registry loses both.
 *
 * Work is per node and serialised per node: each run applies the registry's
 * current record of the node, so a burst of changes collapses into the last
 * one. A failed route install is logged and retried on a timer; nothing here
 * ends in an unhandled rejection.
 */
export class RemoteNodes {
  readonly #registry: NodeRegistryView;
  readonly #nodeName: string;
  readonly #ipcache: IPCache;
  readonly #routing: NodeRoutingDatapath | undefined;
  readonly #log: Logger | undefined;
  readonly #retryMs: number;
  readonly #serial = new KeyedSerializer();
  readonly #installed = new Map<string, Installed>();
  /** Pending retries by node, with the delay the next failure waits. */
  readonly #retries = new Map<string, { timer: NodeJS.Timeout | undefined; backoff: Backoff }>();
  #unsubscribe: (() => void) | undefined;
  #running = false;
  /** Whether this node's own node IP was IPv6 alone when the tunnel endpoints were last chosen (#tunnelEndpoint). */
  #ownIpv6Only = false;
  /** `node/family` pairs already warned about (#warnUnreachableUnderlay). */
  readonly #warnedUnderlay = new Set<string>();

  constructor(o: { registry: NodeRegistryView; nodeName: string; ipcache: IPCache; routing?: NodeRoutingDatapath; logger?: Logger; retryMs?: number }) {
    this.#registry = o.registry;
    this.#nodeName = o.nodeName;
    this.#ipcache = o.ipcache;
    this.#routing = o.routing;
    this.#log = o.logger;
    this.#retryMs = o.retryMs ?? 200;
  }

  /**
   * Installs every remote node the registry lists (call it after the
   * registry's start), after removing routes of nodes that are gone (left by
   * an earlier run). Resolves after one attempt per node: failures are
   * retried in the background.
   */
  async start(): Promise<void> {
    if (this.#running) return;
    this.#running = true;
    const names = this.#registry
      .list()
      .map((n) => n.name)
      .filter((n) => n !== this.#nodeName);
    // The prune goes to the datapath first, in the same tick as the listing: every install — of a node
    // listed now or of one that joins while this start runs — queues behind it, so it never removes a
    // node this agent has just installed.
    const pruned = this.#routing?.pruneRemoteNodes(names).catch((err: unknown) => {
      // Stale routes of dead nodes point nowhere useful but break nothing live; the next start prunes again.
      this.#log?.error({ err }, 'cannot prune routes of nodes that are gone');
    });
    this.#ownIpv6Only = this.#isOwnIpv6Only();
    this.#unsubscribe = this.#registry.subscribe((change) => {
      if (change.node.name !== this.#nodeName) void this.#schedule(change.node.name);
      else if (this.#isOwnIpv6Only() !== this.#ownIpv6Only) {
        // This node's own node IP changed family: every tunnel endpoint is chosen again.
        this.#ownIpv6Only = this.#isOwnIpv6Only();
        for (const name of this.#installed.keys()) void this.#schedule(name);
      }
    });
    await Promise.all([pruned, ...names.map((n) => this.#schedule(n))]);
  }

  /** Stops following the registry. What is installed stays (the next start prunes what is stale). */
  async stop(): Promise<void> {
    this.#running = false;
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
    for (const r of this.#retries.values()) if (r.timer !== undefined) clearTimeout(r.timer);
    this.#retries.clear();
    await this.#serial.idle();
  }

  /** Whether the node's ipcache entries and routes match its record. */
  installed(name: string): boolean {
    return this.#installed.get(name)?.complete === true;
  }

  /** Resolves when every queued node update has run (tests). */
  idle(): Promise<void> {
    return this.#serial.idle();
  }

  /** Queues a sync of one node; never rejects. */
  #schedule(name: string): Promise<void> {
    const retry = this.#retries.get(name);
    if (retry?.timer !== undefined) {
      // A fresh change goes now; the backoff carries on if it fails again.
      clearTimeout(retry.timer);
      retry.timer = undefined;
    }
    return this.#serial.run(name, () => this.#sync(name)).catch((err: unknown) => {
      this.#log?.warn({ err, node: name }, 'remote node update failed; retrying');
      this.#retryLater(name);
    });
  }

  async #sync(name: string): Promise<void> {
    if (!this.#running) return;
    const record = name === this.#nodeName ? undefined : this.#registry.get(name);
    if (record === undefined) await this.#remove(name);
    else await this.#install(record);
  }

  async #install(node: NodeRecord): Promise<void> {
    const state = this.#installed.get(node.name) ?? { prefixes: new Set<string>(), route: undefined, complete: false };
    this.#installed.set(node.name, state);
    state.complete = false;
    // The node's IP: its IPv4 InternalIP, else (an IPv6-only node) its IPv6 one. Native routing reaches a dual-stack node's
    // IPv6 pods by its IPv6 InternalIP.
    const ip4 = primaryNodeIp(node);
    const ip6 = nodeIpOfFamily(node, 6);
    const hostIP = ip4 ?? ip6;
    const endpoint = this.#tunnelEndpoint(ip4, ip6);
    if (hostIP === undefined) this.#log?.warn({ node: node.name }, 'remote node has no InternalIP: no tunnel endpoint and no routes to its pods');
    else this.#warnUnreachableUnderlay(node, endpoint!);
    this.#setEntries(node.name, state, node.addresses.map((a) => a.ip), endpoint);
    if (this.#routing !== undefined) {
      if (node.routingMode !== this.#routing.mode) {
        // Both ends must agree for pod traffic to flow; the record says what the other side expects, so say it loudly.
        this.#log?.warn({ node: node.name, theirs: node.routingMode, ours: this.#routing.mode }, 'remote node runs another routing mode');
      }
      if (hostIP === undefined) {
        if (state.route !== undefined) await this.#routing.removeRemoteNode(node.name);
        state.route = undefined;
      } else {
        // Every pod CIDR, with the IPv6 next hop: the datapath routes what its mode can carry.
        const route: RemoteNodeRoute = { name: node.name, nodeIp: hostIP, ...(ip4 !== undefined && ip6 !== undefined ? { nodeIp6: ip6 } : {}), podCidrs: [...node.podCidrs] };
        if (!sameRoute(state.route, route)) {
          state.route = undefined;
          await this.#routing.upsertRemoteNode(route);
          state.route = route;
          this.#log?.info({ node: node.name, nodeIp: hostIP, podCidrs: route.podCidrs }, 'routes to remote node installed');
        }
      }
    }
    state.complete = true;
    this.#settled(node.name);
  }

  async #remove(name: string): Promise<void> {
    const state = this.#installed.get(name);
    if (state === undefined) return;
    state.complete = false;
    this.#setEntries(name, state, [], undefined);
    // Called even when the last install failed: it may have left part of the routes.
    if (this.#routing !== undefined) await this.#routing.removeRemoteNode(name);
    this.#installed.delete(name);
    this.#settled(name);
    this.#log?.info({ node: name }, 'remote node removed');
  }

  /**
   * Where the overlay reaches a remote node: its node IP of the family this
   * node's own node IP has, when it has one, else its other one. So a node
   * with an IPv6 node IP alone reaches a dual-stack peer over the IPv6
   * underlay, and a dual-stack node reaches an IPv6-only peer at its IPv6
   * address: one cluster may mix IPv6-only nodes with dual-stack ones.
   */
  #tunnelEndpoint(ip4: string | undefined, ip6: string | undefined): string | undefined {
    return this.#isOwnIpv6Only() ? (ip6 ?? ip4) : (ip4 ?? ip6);
  }

  /** Whether this node's own record has an IPv6 node IP and no IPv4 one. */
  #isOwnIpv6Only(): boolean {
    const own = this.#registry.get(this.#nodeName);
    return own !== undefined && primaryNodeIp(own) === undefined && nodeIpOfFamily(own, 6) !== undefined;
  }

  /**
   * A remote node reached at an endpoint of a family this node has no
   * InternalIP of (an IPv6-only node facing a node with an IPv4 InternalIP
   * alone) cannot be sent to: the kernel drops what it encapsulates unseen.
   * Said once per node and family, at warn: such nodes share no underlay.
   */
  #warnUnreachableUnderlay(node: NodeRecord, hostIP: string): void {
    if (this.#routing?.mode !== 'tunnel') return;
    const own = this.#registry.get(this.#nodeName);
    const family = tryParseIp(hostIP)?.family;
    if (own === undefined || family === undefined || nodeIpOfFamily(own, family) !== undefined) return;
    const key = `${node.name}/${family}`;
    if (this.#warnedUnderlay.has(key)) return;
    this.#warnedUnderlay.add(key);
    this.#log?.warn(
      { node: node.name, tunnelEndpoint: hostIP },
      `remote node ${node.name} is reached through the overlay at its IPv${family} node IP, and this node has no IPv${family} InternalIP: its pods are unreachable from here; give the nodes an underlay family in common (an IPv6 address beside an IPv4 node IP)`,
    );
  }

  /** Makes the node's ipcache entries exactly `ips` (addresses that went are deleted). */
  #setEntries(name: string, state: Installed, ips: readonly string[], hostIP: string | undefined): void {
    const meta = { source: IpcacheSource.Kvstore, owner: remoteNodeOwner(name) };
    const next = new Set<string>();
    for (const ip of ips) {
      const addr = tryParseIp(ip);
      if (addr !== undefined) next.add(formatPrefix(hostPrefix(addr)));
    }
    for (const prefix of state.prefixes) if (!next.has(prefix)) this.#ipcache.delete(prefix, meta);
    for (const prefix of next) {
      this.#ipcache.upsert(prefix, { ...meta, identity: ReservedIdentity.RemoteNode, ...(hostIP === undefined ? {} : { hostIP }) });
    }
    state.prefixes = next;
  }

  /** The node is in its wanted state: no retry pending, the backoff starts over. */
  #settled(name: string): void {
    const r = this.#retries.get(name);
    if (r?.timer !== undefined) clearTimeout(r.timer);
    this.#retries.delete(name);
  }

  #retryLater(name: string): void {
    if (!this.#running) return;
    const r = this.#retries.get(name) ?? { timer: undefined, backoff: new Backoff({ initialMs: this.#retryMs, maxMs: MAX_RETRY_MS }) };
    this.#retries.set(name, r);
    if (r.timer !== undefined) return;
    const delay = r.backoff.next();
    r.timer = setTimeout(() => {
      r.timer = undefined;
      void this.#schedule(name);
    }, delay);
    r.timer.unref();
  }
}
