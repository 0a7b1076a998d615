/**
 * The operator's views of the two objects it reads but does not own:
 * TendrilNode and TendrilEndpoint, read through their shared codecs
 * (src/k8s/tendrilNode.ts, src/k8s/tendrilEndpoint.ts), so the operator
 * accepts exactly what the agents accept. The controllers read only these
 * views, never the objects' fields.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import { endpointSpecOf, podOwnerUid } from '../k8s/tendrilEndpoint.js';
import { allocatedPodCidrsOfObject } from '../k8s/tendrilNode.js';

/** What the operator reads of a TendrilNode. */
export interface OperatorNodeView {
  name: string;
  uid: string;
  resourceVersion: string;
  /**
   * spec.ipam.podCIDRs: the cluster-pool CIDRs the operator handed out.
   * Absent when none are, or when what is there is not a list of CIDRs (no
   * agent can use it either: the node is handed CIDRs afresh).
   */
  ipamPodCIDRs: string[] | undefined;
}

export function readTendrilNode(obj: KubernetesObject): OperatorNodeView | undefined {
  const name = obj.metadata?.name;
  if (name === undefined) return undefined;
  const cidrs = allocatedPodCidrsOfObject(obj);
  return {
    name,
    uid: obj.metadata?.uid ?? '',
    resourceVersion: obj.metadata?.resourceVersion ?? '',
    ipamPodCIDRs: typeof cidrs === 'string' || cidrs.length === 0 ? undefined : cidrs,
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
  /**
   * spec.node; '' when the spec is unreadable (endpointSpecOf refuses it):
   * no agent routes by such an object, and its node is not judged.
   */
  node: string;
  /** spec.identity; undefined when the spec is unreadable (no node's ipcache holds it then). */
  identity: number | undefined;
  /** The Pod owner (the object is named by its pod: design27.md), if the object has a Pod ownerReference. */
  ownerPod: { name: string; uid: string } | undefined;
}

export function readTendrilEndpoint(obj: KubernetesObject): OperatorEndpointView | undefined {
  const name = obj.metadata?.name;
  if (name === undefined) return undefined;
  const spec = endpointSpecOf(obj);
  const ownerUid = podOwnerUid(obj);
  return {
    namespace: obj.metadata?.namespace ?? '',
    name,
    uid: obj.metadata?.uid ?? '',
    resourceVersion: obj.metadata?.resourceVersion ?? '',
    node: typeof spec === 'string' ? '' : spec.node,
    identity: typeof spec === 'string' ? undefined : spec.identity,
    ownerPod: ownerUid === undefined ? undefined : { name, uid: ownerUid },
  };
}
