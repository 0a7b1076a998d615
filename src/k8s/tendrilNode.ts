/**
 * The TendrilNode object (deploy/kubernetes/crds/tendrilnodes.yaml): one
 * node's record in the Kubernetes API, named by the node. Its spec is the
 * node's NodeRecord minus the name (podCidrs spelt podCIDRs, as Kubernetes
 * spells it), written by that node's agent, plus spec.ipam: the cluster-pool
 * CIDRs the operator hands the node, which the agent never writes.
 *
 * An object is another writer's word (another agent version, kubectl, a
 * bug): reading it runs the kvstore record's validation (parseNodeRecord) and
 * returns a reason instead of throwing, so one broken object cannot stop a
 * node from seeing the others.
 */
import type { KubernetesObject, V1OwnerReference } from '@kubernetes/client-node';
import { formatPrefix, tryParsePrefix } from '../netip/index.js';
import { normalizeNodeRecord, parseNodeRecord } from '../node/nodeRecord.js';
import type { NodeRecord } from '../node/types.js';
import { TENDRIL_POLICY_GROUP, TENDRIL_POLICY_VERSION } from './policyWatcher.js';

export const TENDRIL_NODE_GROUP = TENDRIL_POLICY_GROUP;
export const TENDRIL_NODE_VERSION = TENDRIL_POLICY_VERSION;
export const TENDRIL_NODE_PLURAL = 'tendrilnodes';
export const TENDRIL_NODE_KIND = 'TendrilNode';
export const TENDRIL_NODE_PATH = `/apis/${TENDRIL_NODE_GROUP}/${TENDRIL_NODE_VERSION}/${TENDRIL_NODE_PLURAL}`;

/** What the node's agent writes: its record's fields. */
export interface TendrilNodeSpec {
  addresses: NodeRecord['addresses'];
  podCIDRs: string[];
  routingMode: NodeRecord['routingMode'];
  tunnel?: NodeRecord['tunnel'];
  health: NodeRecord['health'];
  startedAt: string;
  /** Where the node serves its flows (--flows-listen-addr); absent when it does not. */
  flows?: NodeRecord['flows'];
  /** The operator's: cluster-pool CIDRs handed to the node. */
  ipam?: { podCIDRs?: string[] };
}

export interface TendrilNodeObject extends KubernetesObject {
  spec: TendrilNodeSpec;
}

/** At most this many operator CIDRs are read (the CRD's bound): one per family, with room to grow. */
const MAX_IPAM_CIDRS = 16;

/** The agent's part of the spec for a record (normalized; throws NodeRecordError for a record others could not read). */
export function tendrilNodeSpec(record: NodeRecord): Omit<TendrilNodeSpec, 'ipam'> {
  const r = normalizeNodeRecord(record);
  return {
    addresses: r.addresses,
    podCIDRs: r.podCidrs,
    routingMode: r.routingMode,
    ...(r.tunnel === undefined ? {} : { tunnel: r.tunnel }),
    health: r.health,
    startedAt: r.startedAt,
    ...(r.flows === undefined ? {} : { flows: r.flows }),
  };
}

/** A new object for the node's record; ownerReferences to its Node when known. */
export function tendrilNodeObject(record: NodeRecord, owner?: V1OwnerReference): TendrilNodeObject {
  return {
    apiVersion: `${TENDRIL_NODE_GROUP}/${TENDRIL_NODE_VERSION}`,
    kind: TENDRIL_NODE_KIND,
    metadata: { name: record.name, labels: { 'app.kubernetes.io/part-of': 'tendril' }, ...(owner === undefined ? {} : { ownerReferences: [owner] }) },
    spec: tendrilNodeSpec(record),
  };
}

/**
 * A JSON merge patch (RFC 7386) writing the agent's fields and nothing else:
 * spec.ipam is left as the operator wrote it; fields the record lacks (a
 * tunnel in native mode, a health reason once ok) are removed with null.
 */
export function tendrilNodeSpecPatch(record: NodeRecord): { spec: Record<string, unknown> } {
  const spec = tendrilNodeSpec(record);
  return {
    spec: {
      addresses: spec.addresses,
      podCIDRs: spec.podCIDRs,
      routingMode: spec.routingMode,
      tunnel: spec.tunnel ?? null,
      health: { status: spec.health.status, reason: spec.health.reason ?? null },
      startedAt: spec.startedAt,
      flows: spec.flows ?? null,
    },
  };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The record an object holds, or why it holds none (the same rules as a kvstore record: parseNodeRecord). */
export function nodeRecordOfObject(obj: KubernetesObject): NodeRecord | string {
  const name = obj.metadata?.name;
  if (typeof name !== 'string') return 'no metadata.name';
  const spec = (obj as { spec?: unknown }).spec;
  if (!isRecord(spec)) return 'no spec';
  const { podCIDRs, ipam: _ipam, ...rest } = spec;
  return parseNodeRecord({ ...rest, podCidrs: podCIDRs, name }, name);
}

/** spec.ipam.podCIDRs in canonical form, [] when unset; a reason when they are not CIDRs. */
export function allocatedPodCidrsOfObject(obj: KubernetesObject): string[] | string {
  const spec = (obj as { spec?: unknown }).spec;
  const ipam = isRecord(spec) ? spec.ipam : undefined;
  if (ipam === undefined || ipam === null) return [];
  if (!isRecord(ipam)) return 'spec.ipam is not an object';
  const cidrs = ipam.podCIDRs;
  if (cidrs === undefined || cidrs === null) return [];
  if (!Array.isArray(cidrs) || cidrs.length > MAX_IPAM_CIDRS) return `spec.ipam.podCIDRs is not a list of at most ${MAX_IPAM_CIDRS} CIDRs`;
  const out: string[] = [];
  for (const c of cidrs) {
    const p = typeof c === 'string' ? tryParsePrefix(c) : undefined;
    if (p === undefined) return `spec.ipam.podCIDRs: ${JSON.stringify(c)} is not a CIDR without host bits (addr/len)`;
    out.push(formatPrefix(p));
  }
  return out;
}
