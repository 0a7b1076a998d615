/**
 * PROVISIONAL readers of the two objects the operator reads but does not own:
 * TendrilNode (src/k8s/tendrilNode.ts) and TendrilEndpoint
 * (src/k8s/tendrilEndpoint.ts), built in parallel to design27.md's shapes.
 * Only the fields the operator needs, read defensively (a field of the wrong
 * type reads as absent, never throws). When the shared codecs land, the lead
 * replaces the bodies of these functions with calls to them and keeps the
 * return types (or maps to them): nothing else in src/operator reads the
 * objects' fields directly.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import { TENDRIL_IDENTITY_GROUP, TENDRIL_IDENTITY_VERSION } from '../k8s/tendrilIdentity.js';

export const TENDRIL_GROUP = TENDRIL_IDENTITY_GROUP;
export const TENDRIL_VERSION = TENDRIL_IDENTITY_VERSION;
export const TENDRIL_NODE_PLURAL = 'tendrilnodes';
export const TENDRIL_ENDPOINT_PLURAL = 'tendrilendpoints';
export const TENDRIL_NODE_PATH = `/apis/${TENDRIL_GROUP}/${TENDRIL_VERSION}/${TENDRIL_NODE_PLURAL}`;
export const TENDRIL_ENDPOINT_PATH = `/apis/${TENDRIL_GROUP}/${TENDRIL_VERSION}/${TENDRIL_ENDPOINT_PLURAL}`;
/** Name prefix of a node's liveness Lease (design27.md: `tendril-node-<nodeName>`). */
export const NODE_LEASE_PREFIX = 'tendril-node-';

type Obj = Record<string, unknown>;

const objectAt = (o: unknown, key: string): Obj | undefined => {
  if (typeof o !== 'object' || o === null) return undefined;
  const v = (o as Obj)[key];
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Obj) : undefined;
};
const strings = (v: unknown): string[] | undefined => (Array.isArray(v) && v.every((x) => typeof x === 'string') ? (v as string[]) : undefined);

/** What the operator reads of a TendrilNode. */
export interface OperatorNodeView {
  name: string;
  uid: string;
  resourceVersion: string;
  /** spec.ipam.podCIDRs: the cluster-pool CIDRs the operator handed out (absent: none yet). */
  ipamPodCIDRs: string[] | undefined;
}

export function readTendrilNode(obj: KubernetesObject): OperatorNodeView | undefined {
  const name = obj.metadata?.name;
  if (name === undefined) return undefined;
  const ipam = objectAt(objectAt(obj, 'spec'), 'ipam');
  return {
    name,
    uid: obj.metadata?.uid ?? '',
    resourceVersion: obj.metadata?.resourceVersion ?? '',
    ipamPodCIDRs: strings(ipam?.podCIDRs),
  };
}

/**
 * The JSON merge patch that sets spec.ipam.podCIDRs, conditional on the
 * object's resourceVersion (a merge patch carrying metadata.resourceVersion
 * is refused with 409 when the object moved on). Only spec.ipam is written:
 * the agent owns the rest of spec.
 */
export function tendrilNodeIpamPatch(resourceVersion: string, podCIDRs: readonly string[]): object {
  return { metadata: { resourceVersion }, spec: { ipam: { podCIDRs: [...podCIDRs] } } };
}

/** What the operator reads of a TendrilEndpoint. */
export interface OperatorEndpointView {
  namespace: string;
  name: string;
  uid: string;
  resourceVersion: string;
  /** spec.node; '' when missing. */
  node: string;
  /** spec.identity; undefined when missing or not a number. */
  identity: number | undefined;
  /** The ownerReference to a Pod, if any. */
  ownerPod: { name: string; uid: string } | undefined;
}

export function readTendrilEndpoint(obj: KubernetesObject): OperatorEndpointView | undefined {
  const name = obj.metadata?.name;
  if (name === undefined) return undefined;
  const spec = objectAt(obj, 'spec');
  const identity = spec?.identity;
  const owner = (obj.metadata?.ownerReferences ?? []).find((r) => r.kind === 'Pod' && r.apiVersion === 'v1');
  return {
    namespace: obj.metadata?.namespace ?? '',
    name,
    uid: obj.metadata?.uid ?? '',
    resourceVersion: obj.metadata?.resourceVersion ?? '',
    node: typeof spec?.node === 'string' ? spec.node : '',
    identity: typeof identity === 'number' && Number.isInteger(identity) ? identity : undefined,
    ownerPod: owner === undefined ? undefined : { name: owner.name, uid: owner.uid },
  };
}
