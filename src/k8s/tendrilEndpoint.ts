/**
 * The TendrilEndpoint object (deploy/kubernetes/crds/tendrilendpoints.yaml):
 * one pod's endpoint, in the pod's namespace under the pod's name, owned by
 * the Pod. Encoding what this node writes, and decoding (with validation)
 * what any writer left: the reader takes nothing it cannot put in its
 * ipcache as it is.
 */
import { createHash } from 'node:crypto';
import type { KubernetesObject } from '@kubernetes/client-node';
import { MAX_GLOBAL_IDENTITY, ReservedIdentity, scopeOf } from '../identity/index.js';
import { formatIp, tryParseIp } from '../netip/index.js';
import { TENDRIL_POLICY_GROUP, TENDRIL_POLICY_VERSION } from './policyWatcher.js';

export const TENDRIL_ENDPOINT_GROUP = TENDRIL_POLICY_GROUP;
export const TENDRIL_ENDPOINT_VERSION = TENDRIL_POLICY_VERSION;
export const TENDRIL_ENDPOINT_PLURAL = 'tendrilendpoints';
export const TENDRIL_ENDPOINT_KIND = 'TendrilEndpoint';
/** Every namespace's objects (the collection path of a namespaced custom resource across namespaces). */
export const TENDRIL_ENDPOINT_PATH = `/apis/${TENDRIL_ENDPOINT_GROUP}/${TENDRIL_ENDPOINT_VERSION}/${TENDRIL_ENDPOINT_PLURAL}`;
/** The label naming the node that wrote the object (pruneStale and kubectl select on it): nodeLabelValue(node). */
export const TENDRIL_ENDPOINT_NODE_LABEL = 'tendril.io/node';

/**
 * The node label's value: the node's name, or for a name a label value cannot
 * hold (over 63 characters; node names may have 253) `sha256-` and the first
 * 40 hex digits of its hash — an object must still be writable, and selectable.
 */
export function nodeLabelValue(nodeName: string): string {
  if (nodeName.length <= 63) return nodeName;
  return `sha256-${createHash('sha256').update(nodeName).digest('hex').slice(0, 40)}`;
}
/** The CRD's limit: a pod has one address per family per interface; more is a broken writer. */
export const MAX_ENDPOINT_ADDRESSES = 16;

export interface TendrilEndpointSpec {
  node: string;
  nodeIP: string;
  nodeIP6?: string;
  identity: number;
  addresses: string[];
  endpointID: number;
}

export interface TendrilEndpointObject extends KubernetesObject {
  spec: TendrilEndpointSpec;
}

/** One of this node's endpoints that belongs to a Kubernetes pod: what its object says. */
export interface PublishedEndpoint {
  /** The node-local endpoint id. */
  id: number;
  podNamespace: string;
  podName: string;
  /** The Pod's metadata.uid: the object's owner, so the garbage collector deletes it with the pod. */
  podUid: string;
  identity: number;
  /** Canonical IP addresses, sorted. */
  addresses: string[];
}

/** This node, as its objects name it. */
export interface PublishingNode {
  name: string;
  nodeIP: string;
  nodeIP6?: string;
}

// RFC 1123 subdomain (a Node's name), as apimachinery's IsDNS1123Subdomain.
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

export function isNodeName(name: unknown): name is string {
  return typeof name === 'string' && name.length <= 253 && DNS_SUBDOMAIN.test(name);
}

/**
 * An identity a pod's endpoint may carry elsewhere: a cluster-wide one, or
 * `reserved:init` while its labels are not known (other nodes must still
 * tell the pod apart from the world). Node-local (CIDR) identities mean
 * nothing on another node, and the other reserved ones are never a pod's.
 */
export function isPublishableIdentity(id: number): boolean {
  return Number.isInteger(id) && (id === ReservedIdentity.Init || scopeOf(id) === 'global') && id <= MAX_GLOBAL_IDENTITY;
}

/** The canonical text of an IP address, or undefined when the text is not one. */
export function canonicalIp(text: unknown): string | undefined {
  if (typeof text !== 'string') return undefined;
  const ip = tryParseIp(text);
  return ip === undefined ? undefined : formatIp(ip);
}

export function tendrilEndpointObject(ep: PublishedEndpoint, node: PublishingNode, resourceVersion?: string): TendrilEndpointObject {
  return {
    apiVersion: `${TENDRIL_ENDPOINT_GROUP}/${TENDRIL_ENDPOINT_VERSION}`,
    kind: TENDRIL_ENDPOINT_KIND,
    metadata: {
      name: ep.podName,
      namespace: ep.podNamespace,
      labels: { [TENDRIL_ENDPOINT_NODE_LABEL]: nodeLabelValue(node.name) },
      // No controller/blockOwnerDeletion: the pod's deletion must never wait for this object.
      ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: ep.podName, uid: ep.podUid }],
      ...(resourceVersion === undefined ? {} : { resourceVersion }),
    },
    spec: {
      node: node.name,
      nodeIP: node.nodeIP,
      ...(node.nodeIP6 === undefined ? {} : { nodeIP6: node.nodeIP6 }),
      identity: ep.identity,
      addresses: [...ep.addresses],
      endpointID: ep.id,
    },
  };
}

/**
 * What the ipcache sync keeps of an object (the informer caches this, not the
 * client's full object: at 50,000 remote pods the difference is most of the
 * agent's memory). `spec` is undefined when the object is unusable, `problem`
 * says why.
 */
export interface CompactEndpoint extends KubernetesObject {
  metadata: { name: string; namespace: string; resourceVersion?: string; uid?: string };
  /** ownerReferences' Pod uid (undefined: none). */
  podUid?: string;
  spec?: TendrilEndpointSpec;
  problem?: string;
}

/** The object's spec if every field is usable, else the reason it is not (first problem found). */
export function endpointSpecOf(obj: unknown): TendrilEndpointSpec | string {
  const spec = (obj as { spec?: unknown } | null)?.spec;
  if (typeof spec !== 'object' || spec === null) return 'no spec';
  const s = spec as Record<string, unknown>;
  if (!isNodeName(s.node)) return `spec.node ${JSON.stringify(s.node)} is not a node name`;
  const nodeIP = canonicalIp(s.nodeIP);
  if (nodeIP === undefined) return `spec.nodeIP ${JSON.stringify(s.nodeIP)} is not an IP address`;
  let nodeIP6: string | undefined;
  if (s.nodeIP6 !== undefined) {
    nodeIP6 = canonicalIp(s.nodeIP6);
    if (nodeIP6 === undefined || !nodeIP6.includes(':')) return `spec.nodeIP6 ${JSON.stringify(s.nodeIP6)} is not an IPv6 address`;
  }
  if (typeof s.identity !== 'number' || !isPublishableIdentity(s.identity)) return `spec.identity ${JSON.stringify(s.identity)} is not a cluster-wide identity`;
  if (!Array.isArray(s.addresses) || s.addresses.length === 0 || s.addresses.length > MAX_ENDPOINT_ADDRESSES) {
    return `spec.addresses must list 1 to ${MAX_ENDPOINT_ADDRESSES} addresses`;
  }
  const addresses: string[] = [];
  for (const a of s.addresses) {
    const ip = canonicalIp(a);
    if (ip === undefined) return `spec.addresses: ${JSON.stringify(a)} is not an IP address`;
    addresses.push(ip);
  }
  const endpointID = s.endpointID;
  if (typeof endpointID !== 'number' || !Number.isInteger(endpointID) || endpointID < 1) return `spec.endpointID ${JSON.stringify(endpointID)} is not an endpoint id`;
  return { node: s.node, nodeIP, ...(nodeIP6 === undefined ? {} : { nodeIP6 }), identity: s.identity, addresses: [...new Set(addresses)], endpointID };
}

/** The Pod uid the object is owned by, if any. */
export function podOwnerUid(obj: KubernetesObject): string | undefined {
  const ref = obj.metadata?.ownerReferences?.find((r) => r.kind === 'Pod' && r.apiVersion === 'v1');
  return ref?.uid;
}

export interface CompactOptions {
  /**
   * Only this node's objects keep their uid and owner uid (its writes need
   * them); another node's need neither, and 50,000 uids are 5 MiB.
   */
  ownNode?: string;
  /** Shares repeated strings (namespaces, node names and IPs: a few hundred values over 50,000 objects). */
  intern?: (s: string) => string;
}

/**
 * The informer's transform: the fields the sync reads, validated once.
 * metadata.name/namespace/resourceVersion stay for the informer's own cache
 * (it keys by them and skips an event whose resourceVersion it has).
 */
export function compactEndpoint(obj: KubernetesObject, o: CompactOptions = {}): CompactEndpoint {
  const m = obj.metadata ?? {};
  const intern = o.intern ?? ((s: string) => s);
  let spec = endpointSpecOf(obj);
  if (typeof spec !== 'string') {
    spec = { ...spec, node: intern(spec.node), nodeIP: intern(spec.nodeIP), ...(spec.nodeIP6 === undefined ? {} : { nodeIP6: intern(spec.nodeIP6) }) };
  }
  const keepUids = o.ownNode === undefined || typeof spec === 'string' || spec.node === o.ownNode;
  const podUid = keepUids ? podOwnerUid(obj) : undefined;
  return {
    metadata: {
      name: m.name ?? '',
      namespace: intern(m.namespace ?? ''),
      ...(m.resourceVersion === undefined ? {} : { resourceVersion: m.resourceVersion }),
      ...(m.uid === undefined || !keepUids ? {} : { uid: m.uid }),
    },
    ...(podUid === undefined ? {} : { podUid }),
    ...(typeof spec === 'string' ? { problem: spec } : { spec }),
  };
}

/** Whether the object already says what `ep` would write for this node (then nothing is written). */
export function sameEndpoint(c: CompactEndpoint, ep: PublishedEndpoint, node: PublishingNode): boolean {
  const s = c.spec;
  return (
    s !== undefined &&
    c.podUid === ep.podUid &&
    s.node === node.name &&
    s.nodeIP === node.nodeIP &&
    s.nodeIP6 === node.nodeIP6 &&
    s.identity === ep.identity &&
    s.endpointID === ep.id &&
    s.addresses.length === ep.addresses.length &&
    s.addresses.every((a, i) => a === ep.addresses[i])
  );
}
