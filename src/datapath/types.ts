/**
 * What the endpoint and agent logic need from the datapath. The Linux
 * implementation programs links, addresses and routes; the eBPF datapath will
 * add its maps behind the same interface. `fake/` holds an in-memory
 * implementation and `testing/contract.ts` the one suite both must pass.
 */
import { CodedError, type CodedErrorJson } from '../errors/codedError.js';
import type { IpFamily } from '../netip/index.js';
import type { MapEntry } from '../policy/index.js';

export type { IpFamily };

/**
 * Why a datapath operation failed, as far as callers need to branch on it.
 * `refused`: the request names something the datapath must not touch (an
 * interface that is not the pod's); nothing was changed.
 */
export type DatapathErrorKind = 'not-found' | 'exists' | 'netns-gone' | 'refused' | 'failed';

/** The coded-error names of the kinds, one per kind. */
export const DatapathErrorCode = {
  'not-found': 'DATAPATH_NOT_FOUND',
  exists: 'DATAPATH_EXISTS',
  'netns-gone': 'DATAPATH_NETNS_GONE',
  refused: 'DATAPATH_REFUSED',
  failed: 'DATAPATH_FAILED',
} as const satisfies Record<DatapathErrorKind, string>;

export type DatapathErrorCode = (typeof DatapathErrorCode)[DatapathErrorKind];

export class DatapathError extends CodedError<DatapathErrorCode> {
  constructor(
    readonly kind: DatapathErrorKind,
    message: string,
    /** The command that failed, for implementations that run one. */
    readonly argv: readonly string[] = [],
    /** The failing command's stderr, or the kernel's own message for a kernel call. */
    readonly stderr: string = '',
    options?: { cause?: unknown },
  ) {
    super(DatapathErrorCode[kind], message, options);
  }

  protected override toJSONAt(depth: number): CodedErrorJson<DatapathErrorCode> & { kind: DatapathErrorKind; argv?: readonly string[]; stderr?: string } {
    return {
      ...super.toJSONAt(depth),
      kind: this.kind,
      ...(this.argv.length > 0 ? { argv: this.argv } : {}),
      ...(this.stderr !== '' ? { stderr: this.stderr } : {}),
    };
  }
}

/**
 * Whether `err` is a datapath error (of one of `kinds`, when given). A copy of
 * the class from another instance of this module is recognised by its name
 * (and kind) as well as by class.
 */
export function isDatapathError(err: unknown, ...kinds: DatapathErrorKind[]): err is DatapathError {
  if (!(err instanceof DatapathError) && !(err instanceof Error && err.name === 'DatapathError')) return false;
  const kind = (err as Partial<DatapathError>).kind;
  return kinds.length === 0 || (kind !== undefined && kinds.includes(kind));
}

export interface PodAddress {
  family: IpFamily;
  /** Bare address; configured as /32 or /128 in the pod. */
  ip: string;
  /** The node's router address, the pod's gateway. */
  gateway: string;
}

export interface PodNetworkSpec {
  containerId: string;
  /** Path of the pod's network namespace. */
  netns: string;
  /** Interface name inside the pod (CNI_IFNAME). */
  ifName: string;
  mtu: number;
  addresses: PodAddress[];
}

export interface PodNetwork {
  hostIfName: string;
  hostIfIndex: number;
  hostMac: string;
  podIfIndex: number;
  podMac: string;
}

export interface PodTeardownSpec {
  containerId: string;
  /** The host-side interface when it is not tendril's own `lxc<hash>` (an adopted endpoint's). */
  hostIfName?: string;
  /**
   * May be empty or gone: runtimes send DEL after the namespace is destroyed.
   * Empty also means a path the agent refused. The pod's end is removed with
   * the host end, never by its name in here (another attachment may hold it).
   */
  netns: string;
  ifName: string;
  addresses: PodAddress[];
}

/** What an endpoint record says of its pod's interfaces (restore and cleanup check it before trusting it). */
export interface RecordedAttachment {
  containerId: string;
  ifName: string;
  /** The pod's namespace path as recorded ('' when none is). */
  netns: string;
  hostIfName: string;
  /** Made by someone else (PUT /endpoint): any host name, never tendril's to delete. */
  adopted?: boolean;
}

/**
 * The kernel's answer about a recorded attachment: `owned` (its interface is
 * what the record says), `gone` (no interface of that name: the pod went),
 * `foreign` (the name is some other interface's; the reason says how). An
 * owned interface's index and MAC are the kernel's, never the record's.
 */
export type AttachmentOwnership = { kind: 'owned'; hostIfIndex: number; hostMac: string } | { kind: 'gone' } | { kind: 'foreign'; reason: string };

/** A pod's veth pair made by someone else, as PUT /endpoint names it. */
export interface AdoptedPodSpec {
  /** The host end, in the node's namespace. */
  hostIfName: string;
  /** The pod's namespace, which must hold the peer. */
  netns: string;
  /** The peer's name inside the pod. */
  ifName: string;
  addresses: PodAddress[];
}

export interface NodeNetworkSpec {
  /** Router addresses held by the host device, one per configured family. */
  routerAddresses: Array<{ family: IpFamily; ip: string }>;
  /** Traffic from these CIDRs to anywhere outside them is masqueraded. */
  masqueradeCidrs: string[];
}

/**
 * Everything one regeneration of an endpoint puts in force: its identity,
 * addresses, host interface and the policy map state at `policy.revision`.
 * The whole desired state every time, not a diff, so a regeneration that
 * follows a failed one (or an agent restart) converges all the same.
 */
export interface EndpointDatapathState {
  /** The endpoint ID: the key of the eBPF datapath's per-endpoint maps. */
  id: number;
  identity: number;
  hostIfName: string;
  hostIfIndex: number;
  hostMac: string;
  podMac: string;
  addresses: PodAddress[];
  policy: {
    /** The agent's policy revision this map state was computed at. */
    revision: number;
    entries: readonly MapEntry[];
    /** The staged view (enforced and staged policies together), when staged policies select the endpoint: reported, never enforced. */
    stagedEntries?: readonly MapEntry[];
  };
}

/**
 * What a path given as a pod's network namespace names:
 * - `pod`: a network namespace other than the node's;
 * - `node`: the agent's own network namespace or the init namespace (never a pod's);
 * - `missing`: nothing (the runtime removed it, typical before DEL);
 * - `not-netns`: something that is not a namespace file (a FIFO, a regular
 *   file): opening it could block or mean nothing, so it is never used;
 * - `unmounted`: an empty regular file, the mount point a runtime bind-mounts
 *   a namespace on, with nothing mounted on it in the agent's mount namespace
 *   (the runtime mounted it in a private one, e.g. under `ip netns exec`).
 */
export type NetnsKind = 'pod' | 'node' | 'missing' | 'not-netns' | 'unmounted';

/** A service backend's state: only `active` ones take new connections; the others keep those they have. */
export type LbBackendState = 'active' | 'terminating' | 'quarantined' | 'maintenance';
export type LbProtocol = 'TCP' | 'UDP' | 'SCTP';

/** A backend as the datapath holds it: its ID is what conntrack pins a connection to. */
export interface LbBackendEntry {
  id: number;
  /** IPv4 (IPv6 services are not built yet). */
  address: string;
  port: number;
  protocol: LbProtocol;
  state: LbBackendState;
}

/** One frontend of one service, rendered for the maps. */
export interface LbServiceEntry {
  /** The service ID, also its reverse NAT index (1..65535). */
  id: number;
  /** `0.0.0.0` with `nodePort` = every node IPv4 address (IPv6 has no wildcard: the service subsystem writes :: as one entry per node IPv6 address). */
  address: string;
  port: number;
  protocol: LbProtocol;
  type: 'ClusterIP' | 'NodePort' | 'ExternalIPs' | 'LoadBalancer';
  /** externalTrafficPolicy Local: traffic from outside the node only reaches `backendIds` (this node's backends). */
  localTraffic: boolean;
  /** ClientIP session affinity, in seconds; 0 = none. */
  affinityTimeoutSec: number;
  /**
   * Backends new connections may go to (external scope), in slot order.
   * With `localTraffic`, only this node's.
   */
  backendIds: number[];
  /**
   * The internal scope, for traffic from inside the node, when it differs from
   * the external one (externalTrafficPolicy and internalTrafficPolicy differ):
   * every backend, or only this node's.
   */
  internalBackendIds?: number[];
  /** With --lb-algorithm maglev: the table (backend ID per slot) over `backendIds`. */
  maglevTable?: Uint32Array;
  /**
   * loadBalancerSourceRanges: CIDRs of the frontend's family; when given,
   * only sources inside one reach the service (every other packet to it is
   * dropped, DROP_NOT_IN_SRC_RANGE).
   */
  sourceRanges?: readonly string[];
  /**
   * Every backend the service has, in any state: connections pinned to one
   * of them are kept (a terminating backend has no slot but keeps its
   * connections); one pinned to any other backend chooses again on its next
   * packet. The slots' and the Maglev table's backends are members whether
   * listed or not.
   */
  memberIds?: number[];
}

/**
 * The load-balancer maps (the eBPF datapath only). The service subsystem
 * owns IDs and computes entries; this writes them so that a packet never
 * sees a half-written service (backends before the slots naming them, slots
 * before the count that exposes them; the reverse on shrink).
 */
export interface LoadBalancerDatapath {
  upsertBackends(backends: readonly LbBackendEntry[]): Promise<void>;
  /**
   * Removes backends no service has any more (refused while one still has
   * them). Connections still pinned to them are not looked for: the
   * datapath chooses again on their next packet (a connected UDP client
   * moves at once), and their conntrack entries expire.
   */
  deleteBackends(ids: readonly number[]): Promise<void>;
  /**
   * Writes the service's entries (and, for a frontend other than a NodePort,
   * the node's route to it through tendril_host); replaces what the ID had.
   * A backend that is no longer a member loses the service's connections on
   * their next packet, even while it backs other services.
   */
  upsertService(svc: LbServiceEntry): Promise<void>;
  /** Removes the service's own entries; its conntrack and affinity entries are left to expire. */
  deleteService(id: number): Promise<void>;
  /** After the agent restored its services: entries of IDs not in `liveServiceIds`/`liveBackendIds` go. */
  restoreDone(liveServiceIds: readonly number[], liveBackendIds: readonly number[]): Promise<void>;
  /**
   * Runs `fn` (a batch of the calls above); what they leave to do together
   * (the frontends' routes) is done when it returns. Throws after `fn`'s own
   * outcome when that failed: the caller undoes the batch.
   */
  inBatch<T>(fn: () => Promise<T>): Promise<T>;
}

/** One device's programs as the kernel has them (`tendril status`). */
export interface DeviceAttachment {
  name: string;
  /** `node`: a node device (NodePort, masquerade); `loopback`; `host`: the host device pair's end. */
  role: 'node' | 'loopback' | 'host';
  /** Hooks the datapath puts a program on (lo: egress only). */
  expected: Array<'ingress' | 'egress'>;
  /** Expected hooks without our program now (deleted filter, recreated device, device gone). */
  missing: Array<'ingress' | 'egress'>;
}

/** Where the datapath's programs are attached, checked in the kernel. */
export interface AttachmentReport {
  /** The node's devices, lo and the host device. */
  devices: DeviceAttachment[];
  /** Pods' host-side devices: how many should carry both programs, how many do, the names of those that do not. */
  endpoints: { expected: number; attached: number; missing: string[] };
}

export interface Datapath {
  /**
   * Whether syncEndpoint puts the policy map state in force on packets (the
   * eBPF datapath); absent or false for datapaths that only route.
   */
  readonly enforcesPolicy?: boolean;
  /** Service load-balancing in the datapath; absent where services are not supported (the routing datapath). */
  readonly loadBalancer?: LoadBalancerDatapath;
  /** Routes (and, in tunnel mode, the overlay) to other nodes' pods; absent on a datapath without them (the fake in unit tests has one). */
  readonly nodeRouting?: NodeRoutingDatapath;
  /**
   * Called once the agent has restored its endpoints after a start, with the
   * endpoints it holds (ready or not): state the datapath kept across the
   * restart (pinned map entries) of endpoints that are gone can go now.
   * Optional.
   */
  restoreDone?(live: ReadonlyArray<{ id: number; hostIfName: string }>): Promise<void>;
  /** Where its programs are attached, as the kernel has them; absent on datapaths without programs. */
  attachmentStatus?(): Promise<AttachmentReport>;
  /** The ipcache map's failed writes (each retried until it lands) and the prefixes still waiting; absent on datapaths without the map. */
  ipcacheWriteStats?(): { readonly failed: number; readonly pending: number };
  /** Host device, forwarding and masquerading; idempotent, run at every agent start. */
  setupNode(spec: NodeNetworkSpec): Promise<void>;
  /** What `path` names; callers use a path for a pod only when this says `pod`. */
  classifyNetns(path: string): Promise<NetnsKind>;
  /**
   * Plumbs a pod. Throws DatapathError `netns-gone` when the namespace does not
   * exist; on failure everything it created is removed before it throws.
   * Only this attachment's own leftovers (an interrupted ADD) are replaced:
   * an interface on the host named `podHostIfName(containerId, ifName)`, with
   * its peer if that is `ifName` in the pod. Any other interface named
   * `ifName` in the pod (another attachment's, the runtime's) is
   * DatapathError `exists`, and nothing is changed. Callers make sure no
   * endpoint owns the host name.
   */
  addPod(spec: PodNetworkSpec): Promise<PodNetwork>;
  /**
   * What addPod would refuse, asked before anything changes: `netns-gone` when
   * the namespace does not exist, `exists` when `ifName` in it is neither free
   * nor this attachment's own veth peer. Lets a call that replaces an earlier
   * attachment refuse before it deletes that one.
   */
  preflightPod(spec: Pick<PodNetworkSpec, 'containerId' | 'netns' | 'ifName'>): Promise<void>;
  /**
   * Removes what addPod made by deleting the host end (`hostIfName`, else
   * `podHostIfName`); the pod's end of the pair goes with it. Nothing inside
   * the pod's namespace is deleted by name: it may be another attachment's.
   * Parts already gone (and a namespace already gone) are fine.
   */
  removePod(spec: PodTeardownSpec): Promise<void>;
  /** The host-side name addPod gives the attachment's interface (a pure function of its two names). */
  podHostIfName(containerId: string, ifName: string): string;
  /**
   * Takes over a pod whose veth pair someone else created (Cilium's plugin-driven
   * PUT /endpoint): the host-side routes and proxy ARP for its addresses.
   * Only a veth whose peer is `ifName` inside the pod's namespace `netns` is
   * taken: anything else (the node's uplink, tendril_host, another pod's veth)
   * is DatapathError `refused`, before anything is changed. `not-found` when
   * the host interface does not exist.
   */
  adoptPod(spec: AdoptedPodSpec): Promise<{ hostIfIndex: number; hostMac: string }>;
  /** Undoes adoptPod: the host routes go, the interface (not tendril's) stays. Idempotent. */
  releaseAdoptedPod(spec: { hostIfName: string; addresses: PodAddress[] }): Promise<void>;
  /**
   * A regeneration: brings the endpoint's datapath state to `state`,
   * repairing whatever drifted. Idempotent. The Linux datapath puts the host
   * routes, proxy ARP and link state back in force; the eBPF datapath writes
   * the endpoint and policy maps here. DatapathError `not-found` when the
   * host interface is gone.
   */
  syncEndpoint(state: EndpointDatapathState): Promise<void>;
  /** Verifies interface, addresses and routes; throws a DatapathError naming the first mismatch. */
  checkPod(spec: PodNetworkSpec): Promise<void>;
  /** Whether the host side of a pod still exists. */
  podExists(containerId: string, ifName: string, hostIfName?: string): Promise<boolean>;
  /**
   * Whether the host interface a record names is that attachment's: the
   * name derived from (containerId, ifName) unless adopted, and a veth whose
   * peer is `ifName` in the pod's namespace `netns` (a recorded path that is
   * gone: a peer outside the node's namespace, for a derived name only).
   * Restore trusts a record only when this says `owned`.
   */
  verifyAttachment(rec: RecordedAttachment): Promise<AttachmentOwnership>;
  /** Host-side pod interfaces present on the node (lxc…), to find ones no endpoint owns. */
  listPodHostInterfaces(): Promise<string[]>;
  /** Deletes an orphaned host-side pod interface (and so its peer and routes); refuses other names. */
  removeHostInterface(name: string): Promise<void>;
}

/**
 * How this node reaches other nodes' pods, as Cilium names it:
 * `tunnel`: encapsulated on tendril_vxlan to the node the ipcache names, the
 * source identity in the VNI; `native`: routed on the underlay, each remote
 * pod CIDR via its node's IP.
 */
export type RoutingMode = 'tunnel' | 'native';

/** Another node as the datapath needs it. */
export interface RemoteNodeRoute {
  /** The node's name (what its routes are kept by). */
  name: string;
  /**
   * Its IPv4 underlay address: the tunnel endpoint, or the native next hop of
   * its IPv4 pod CIDRs; a node without IPv4 address: its IPv6 one.
   */
  nodeIp: string;
  /** Next to an IPv4 nodeIp, its IPv6 underlay address (first IPv6 InternalIP): native mode's next hop of its IPv6 pod CIDRs. */
  nodeIp6?: string;
  /** Its pod CIDRs of either family, canonical `addr/len`. */
  podCidrs: readonly string[];
}

/**
 * The datapath's side of the node registry: routes to other nodes' pod
 * CIDRs (tunnel: into tendril_host, whose program encapsulates; native: via
 * the node's IP). Calls are idempotent and each names the whole state of one
 * node, so a watch that replays events converges.
 */
export interface NodeRoutingDatapath {
  readonly mode: RoutingMode;
  /** Makes `node`'s routes exactly its pod CIDRs now (routes of CIDRs it no longer has go). */
  upsertRemoteNode(node: RemoteNodeRoute): Promise<void>;
  /** Removes every route of the node `name`; unknown names are not an error. */
  removeRemoteNode(name: string): Promise<void>;
  /** Removes routes of nodes not in `live` (left by an earlier run), after the registry's first listing. */
  pruneRemoteNodes(live: readonly string[]): Promise<void>;
  /** The node routes in force, by node name (for tests and `tendril node list`). */
  remoteNodes(): ReadonlyMap<string, RemoteNodeRoute>;
}
