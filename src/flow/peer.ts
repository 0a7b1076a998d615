/**
 * What a flow's peer is, read from its event alone: its namespace, its
 * labels, and the workload it belongs to (an identity: pods of the same
 * labels in one namespace are one workload; the world, the node and the
 * other nodes are one workload each). Pure, with no Node.js import: the flow
 * UI bundles it (ui/), as it does the map and the policy suggestion.
 */
import type { MonitorPeer } from '../monitor/types.js';

export const POD_NAMESPACE_LABEL_KEY = 'io.kubernetes.pod.namespace';

/** The labels' keys Kubernetes (not the pod) sets: never pod labels a podSelector can name (src/labels/kubernetesDerived.ts). */
const DERIVED_KEY_PREFIXES = ['io.tendril.k8s.', 'io.cilium.k8s.'];
/** Label keys that name a workload, the first present wins (Hubble UI's order). */
const NAME_KEYS = ['app', 'app.kubernetes.io/name', 'k8s-app', 'name'];

/** The reserved identities the map and the suggestion treat as peers of their own (src/identity/constants.ts). */
const HOST_IDENTITY = 1;
const WORLD_IDENTITIES = new Set([2, 9, 10]);
const REMOTE_NODE_IDENTITY = 6;
/** CIDR identities are node-local (bit 24): an address outside the cluster, the world. */
const LOCAL_IDENTITY_SCOPE = 1 << 24;
const MIN_GLOBAL_IDENTITY = 256;

export interface ParsedLabel {
  source?: string;
  key: string;
  value: string;
}

/** `source:key=value` as its parts (value '' when absent). */
export function parseLabelText(text: string): ParsedLabel {
  const colon = text.indexOf(':');
  const eq = text.indexOf('=');
  // A colon after the '=' is part of the value.
  const source = colon < 0 || (eq >= 0 && colon > eq) ? undefined : text.slice(0, colon);
  const rest = source === undefined ? text : text.slice(colon + 1);
  const e = rest.indexOf('=');
  const key = e < 0 ? rest : rest.slice(0, e);
  const value = e < 0 ? '' : rest.slice(e + 1);
  return { ...(source !== undefined ? { source } : {}), key, value };
}

/** The peer's namespace: its pod's, else its identity's namespace label. */
export function peerNamespace(p: MonitorPeer): string | undefined {
  if (p.pod) return p.pod.namespace;
  for (const l of p.labels) {
    const { key, value } = parseLabelText(l);
    if (key === POD_NAMESPACE_LABEL_KEY) return value;
  }
  return undefined;
}

/** The pod's own labels (k8s source, none Kubernetes derives), as a podSelector's matchLabels names them. */
export function podLabelsOf(labels: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const l of labels) {
    const { source, key, value } = parseLabelText(l);
    if (source !== 'k8s') continue;
    const k = key.toLowerCase();
    if (k === POD_NAMESPACE_LABEL_KEY || DERIVED_KEY_PREFIXES.some((p) => k.startsWith(p))) continue;
    out[key] = value;
  }
  return out;
}

export type WorkloadKind = 'pod' | 'world' | 'host' | 'remote-node' | 'reserved';

/** One node of the flow map: an identity, or the world, the node, the other nodes. */
export interface Workload {
  /** Stable key: `id:<identity>` for pods, `world`, `host`, `remote-node`, `reserved:<identity>`. */
  key: string;
  kind: WorkloadKind;
  /** The pods' namespace; absent outside pods. */
  namespace?: string;
  /** The app/name label's value, a pod's name, or what the reserved identity is. */
  name: string;
  identity: number;
  /** The identity's labels (the first peer's that had any). */
  labels: readonly string[];
}

function reservedName(p: MonitorPeer): string {
  for (const l of p.labels) {
    const { source, key } = parseLabelText(l);
    if (source === 'reserved') return key;
  }
  return p.identity === 0 ? 'unknown' : `reserved ${p.identity}`;
}

/** The workload a flow's peer belongs to. */
export function workloadOf(p: MonitorPeer): Workload {
  const id = p.identity;
  if (id === HOST_IDENTITY) return { key: 'host', kind: 'host', name: 'host', identity: id, labels: p.labels };
  if (id === REMOTE_NODE_IDENTITY) return { key: 'remote-node', kind: 'remote-node', name: 'remote-node', identity: id, labels: p.labels };
  if (WORLD_IDENTITIES.has(id) || id >= LOCAL_IDENTITY_SCOPE) return { key: 'world', kind: 'world', name: 'world', identity: id, labels: p.labels };
  const namespace = peerNamespace(p);
  if (id < MIN_GLOBAL_IDENTITY || namespace === undefined) return { key: `reserved:${id}`, kind: 'reserved', name: reservedName(p), identity: id, labels: p.labels };
  const own = podLabelsOf(p.labels);
  const named = NAME_KEYS.find((k) => own[k] !== undefined);
  const name = named !== undefined ? own[named]! : (p.pod?.name ?? `identity ${id}`);
  return { key: `id:${id}`, kind: 'pod', namespace, name, identity: id, labels: p.labels };
}

/** `namespace/name` for pods, the name for the rest. */
export function workloadTitle(w: Workload): string {
  return w.namespace !== undefined ? `${w.namespace}/${w.name}` : w.name;
}
