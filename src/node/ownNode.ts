import { Serializer } from '../async/keyedSerializer.js';
import type { NodeRoutingDatapath } from '../datapath/types.js';
import type { LeaseProvider } from '../identity/index.js';
import type { IPCache } from '../ipcache/index.js';
import type { Backend, Status } from '../kvstore/types.js';
import type { Logger } from '../logging/logger.js';
import { NodeRegistry } from './nodeRegistry.js';
import { RemoteNodes } from './remoteNodes.js';
import type { NodeAddress, NodeFlowsAddress, NodeRecord, NodeRegistryService, RoutingMode, TunnelProtocol } from './types.js';

/** What this node's record says, read again at each write. */
export interface OwnNodeFacts {
  /** The node IP; 0.0.0.0 stands for "no address yet" (delegated IPAM before its first ADD). */
  nodeIp: string;
  /** A second InternalIP of the other family (dual-stack underlay): other nodes' next hop to this node's IPv6 pods. */
  nodeIp6?: string;
  /** The Node's other addresses (Kubernetes on), after the node IP, which stays the tunnel endpoint. */
  otherAddresses: NodeAddress[];
  routerAddresses: string[];
  podCidrs: string[];
  routingMode: RoutingMode;
  tunnel?: { protocol: TunnelProtocol; port: number };
  kvstore: Status;
  startedAt: Date;
  /** Where this node serves its flows (--flows-listen-addr), as other hosts reach it. */
  flows?: NodeFlowsAddress;
}

/** This node as the registry publishes it. */
export function ownNodeRecord(name: string, f: OwnNodeFacts): NodeRecord {
  const kv = f.kvstore;
  const addresses: NodeAddress[] = [
    ...(f.nodeIp !== '0.0.0.0' ? [{ type: 'InternalIP' as const, ip: f.nodeIp }] : []),
    ...(f.nodeIp6 !== undefined && f.nodeIp6 !== f.nodeIp && !f.otherAddresses.some((a) => a.ip === f.nodeIp6) ? [{ type: 'InternalIP' as const, ip: f.nodeIp6 }] : []),
    ...f.otherAddresses,
    ...f.routerAddresses.map((ip) => ({ type: 'RouterIP' as const, ip })),
  ];
  return {
    name,
    addresses,
    podCidrs: f.podCidrs,
    routingMode: f.routingMode,
    ...(f.routingMode === 'tunnel' && f.tunnel ? { tunnel: f.tunnel } : {}),
    health: kv.connected ? { status: 'ok' } : { status: 'degraded', reason: `kvstore ${kv.backend} disconnected${kv.detail ? `: ${kv.detail}` : ''}` },
    startedAt: f.startedAt.toISOString(),
    ...(f.flows ? { flows: f.flows } : {}),
  };
}

interface OwnNodeCommon {
  nodeName: string;
  ipcache: IPCache;
  /** Routes to the other nodes' pod CIDRs; absent: ipcache entries only. */
  routing?: NodeRoutingDatapath;
  logger: Logger;
  /** This node's record's facts as they are now. */
  facts: () => Promise<OwnNodeFacts>;
  /** Calls back after the node's pod CIDRs changed; returns the unsubscribe. */
  onPodCidrsChanged: (cb: () => void) => () => void;
}

/**
 * The registry: one made here over the kvstore (backend + the node's lease),
 * or one given (KubernetesNodeRegistry in crd mode), which start() starts.
 */
export type OwnNodeOptions = OwnNodeCommon & ({ backend: Backend; lease: LeaseProvider } | { registry: NodeRegistryService });

/**
 * This node in the cluster: publishes its record in the registry (under its
 * lease) and follows the others — their addresses into the ipcache
 * (identity remote-node, tunnel endpoint their node IP), their pod CIDRs
 * routed.
 */
export class OwnNode {
  private nodes: NodeRegistryService | undefined;
  private remoteNodes: RemoteNodes | undefined;
  private unsubscribePodCidrs: (() => void) | undefined;
  /** The own record's writes, in order (publish). */
  private readonly publishing = new Serializer();

  constructor(private readonly o: OwnNodeOptions) {}

  /** The cluster's nodes; undefined before start(). */
  get registry(): NodeRegistryService | undefined {
    return this.nodes;
  }

  /** Publishes this node and follows the others; before endpoints are restored, so a restored pod reaches the other nodes' pods at once. */
  async start(): Promise<void> {
    const registry = 'registry' in this.o ? this.o.registry : new NodeRegistry({ backend: this.o.backend, lease: this.o.lease, nodeName: this.o.nodeName, logger: this.o.logger });
    this.nodes = registry;
    await registry.start(await this.record());
    this.remoteNodes = new RemoteNodes({
      registry,
      nodeName: this.o.nodeName,
      ipcache: this.o.ipcache,
      ...(this.o.routing ? { routing: this.o.routing } : {}),
      logger: this.o.logger,
    });
    await this.remoteNodes.start();
    this.unsubscribePodCidrs = this.o.onPodCidrsChanged(() => this.publish('pod CIDRs changed'));
  }

  /** Whether the routes to node `name`'s pod CIDRs are in place. */
  routesInstalled(name: string): boolean {
    return this.remoteNodes?.installed(name) === true;
  }

  /**
   * Writes the own record again (pod CIDRs, router addresses); a failure is
   * logged, the next change or lease renewal writes it. One write at a time,
   * each reading the state when it runs: two block claims close together
   * never leave the older CIDR list as the last word.
   */
  publish(why: string): void {
    const registry = this.nodes;
    if (!registry) return;
    void this.publishing
      .run(async () => registry.update(await this.record()))
      .catch((err: unknown) => this.o.logger.error({ err, why }, 'publishing this node\'s record failed'));
  }

  async stop(): Promise<void> {
    this.unsubscribePodCidrs?.();
    this.unsubscribePodCidrs = undefined;
    await this.remoteNodes?.stop();
    await this.publishing.settled();
    // The record stays: the lease keeps it while a restarted agent takes over, its expiry removes it.
    await this.nodes?.stop();
  }

  private async record(): Promise<NodeRecord> {
    return ownNodeRecord(this.o.nodeName, await this.o.facts());
  }
}
