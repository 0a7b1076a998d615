/**
 * The node registry's model: what each node publishes about itself under
 * `tendril/state/nodes/v1/<name>`, held by its kvstore lease, so a node that
 * dies disappears from every other node's view when its lease expires.
 */
import type { RoutingMode } from '../datapath/types.js';

export type { RoutingMode };

export const TUNNEL_PROTOCOLS = ['vxlan'] as const;
export type TunnelProtocol = (typeof TUNNEL_PROTOCOLS)[number];

/** An address of a node; the types follow Kubernetes' and Cilium's node address types. */
export interface NodeAddress {
  /**
   * `InternalIP`: the underlay address other nodes reach it at (the first
   * IPv4 one is the tunnel endpoint / native next hop);
   * `RouterIP`: its router address in its pod CIDR (Cilium's CiliumInternalIP),
   * the source of its own traffic to pods;
   * `ExternalIP`: an address of the node's Kubernetes Node object reachable
   * from outside the cluster (informational: never a tunnel endpoint).
   */
  type: 'InternalIP' | 'ExternalIP' | 'RouterIP';
  ip: string;
}

/** A node's record in the kvstore (JSON), as the node itself writes it. */
export interface NodeRecord {
  name: string;
  addresses: NodeAddress[];
  /** Its pod CIDRs, from IPAM: host-scope CIDRs, the cluster-pool CIDRs it was given, its affine blocks. Canonical `addr/len`. */
  podCidrs: string[];
  routingMode: RoutingMode;
  /** With routingMode tunnel. */
  tunnel?: { protocol: TunnelProtocol; port: number };
  /** The node's own view of itself: `ok`, or `degraded` with a reason (kvstore or datapath trouble). */
  health: { status: 'ok' | 'degraded'; reason?: string };
  /** When the agent that wrote it started (ISO 8601): a restart shows as a new value. */
  startedAt: string;
  /** Where the node serves its flows for a relay (--flows-listen-addr): `host:port`, over TLS or plain HTTP. Absent: not served (and in records of older agents). */
  flows?: NodeFlowsAddress;
}

/** A node's flows listener as its record announces it. */
export interface NodeFlowsAddress {
  /** `ip:port`, `[ipv6]:port` or `name:port`. */
  address: string;
  tls: boolean;
}

/** A change the registry's watch saw. */
export type NodeChange = { type: 'upsert'; node: NodeRecord; previous?: NodeRecord } | { type: 'delete'; node: NodeRecord };

/** What consumers (the agent's RemoteNodes, the API) need of the registry. */
export interface NodeRegistryView {
  /** Every node known, this one included, by name. */
  list(): NodeRecord[];
  get(name: string): NodeRecord | undefined;
  /** Called for each change after the first listing; returns the unsubscribe. */
  subscribe(listener: (change: NodeChange) => void): () => void;
}

/**
 * A node registry the agent runs: the kvstore one (NodeRegistry: records held
 * by the node's kvstore lease) or the Kubernetes one (KubernetesNodeRegistry:
 * TendrilNode objects, alive while their node's coordination.k8s.io Lease is).
 */
export interface NodeRegistryService extends NodeRegistryView {
  readonly nodeName: string;
  /** Publishes `own` and follows the cluster's nodes; resolves after the first listing. */
  start(own: NodeRecord): Promise<void>;
  /** Publishes a new version of this node's record (pod CIDRs, addresses or health changed). */
  update(own: NodeRecord): Promise<void>;
  /** Stops following and renewing. What this node published stays until its liveness runs out (a restart within it keeps it). */
  stop(): Promise<void>;
  /** A number that grows with each write of the node's record as last seen (the kvstore revision, the object's resourceVersion). */
  revisionOf(name: string): number | undefined;
}

/** A node as `GET /node` answers it: its record, and what this node made of it. */
export interface NodeStatus extends NodeRecord {
  /** This agent's own node. */
  local: boolean;
  /** The kvstore revision of the record as last seen. */
  revision: number;
  /** For a remote node: whether this node has installed its routes (and ipcache entries). */
  routesInstalled?: boolean;
}
