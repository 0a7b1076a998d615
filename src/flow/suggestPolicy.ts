/**
 * "Suggest a policy": from the flows seen to and from one workload, a
 * Kubernetes NetworkPolicy that allows exactly those — each peer by its
 * pod labels (podSelector, with a namespaceSelector on the namespace's
 * `kubernetes.io/metadata.name` when it is another namespace), an address
 * outside the cluster by an ipBlock of that one address, and the
 * destination ports and protocols seen. Peers seen on the same ports share
 * a rule. What a NetworkPolicy cannot say (ICMP, the node itself, a peer
 * without labels) is left out and said in `notes`, never widened silently.
 *
 * Pure, no Node.js import: the flow UI bundles it and tests run it in node.
 */
import { stringify } from 'yaml';
import { podLabelsOf, type Workload, workloadOf, workloadTitle } from './peer.js';
import type { Flow, FlowVerdict } from './types.js';

export class SuggestPolicyError extends Error {
  override readonly name = 'SuggestPolicyError';
}

export type SuggestDirection = 'ingress' | 'egress';

export interface SuggestPolicyOptions {
  /** The directions to write rules for (default both): a direction given with no flow seen denies all of it. */
  directions?: readonly SuggestDirection[];
  /**
   * The verdicts of the flows taken as seen traffic (default: the ones that
   * passed — forwarded, audit, would-drop); add `dropped` to allow what
   * the policy in force refused.
   */
  verdicts?: readonly FlowVerdict[];
  /** metadata.name (default `<workload>-observed`). */
  name?: string;
}

export interface PolicySuggestion {
  subject: Workload;
  /** The NetworkPolicy as an object. */
  document: NetworkPolicyDocument;
  /** The same, as YAML with a comment header (what it came from, the notes). */
  yaml: string;
  /** What was seen but left out, and why. */
  notes: string[];
  /** How many flows went into it. */
  flows: number;
}

type LabelSelector = { matchLabels?: Record<string, string> };
type NetworkPolicyPeer = { podSelector?: LabelSelector; namespaceSelector?: LabelSelector; ipBlock?: { cidr: string } };
type NetworkPolicyPort = { protocol: 'TCP' | 'UDP' | 'SCTP'; port: number };
type NetworkPolicyRule = { from?: NetworkPolicyPeer[]; to?: NetworkPolicyPeer[]; ports: NetworkPolicyPort[] };

export interface NetworkPolicyDocument {
  apiVersion: 'networking.k8s.io/v1';
  kind: 'NetworkPolicy';
  metadata: { name: string; namespace: string };
  spec: {
    podSelector: LabelSelector;
    policyTypes: Array<'Ingress' | 'Egress'>;
    ingress?: NetworkPolicyRule[];
    egress?: NetworkPolicyRule[];
  };
}

const DEFAULT_VERDICTS: readonly FlowVerdict[] = ['forwarded', 'audit', 'would-drop'];
const PROTOCOLS: Record<string, NetworkPolicyPort['protocol']> = { tcp: 'TCP', udp: 'UDP', sctp: 'SCTP' };
const NAMESPACE_NAME_LABEL = 'kubernetes.io/metadata.name';

/** A peer as a NetworkPolicy names it, with a key to merge repeats; or why it cannot be named. */
function policyPeer(w: Workload, ip: string, subjectNamespace: string): { key: string; peer: NetworkPolicyPeer } | { skip: string } {
  if (w.kind === 'world') {
    const cidr = ip.includes(':') ? `${ip}/128` : `${ip}/32`;
    return { key: `ip:${cidr}`, peer: { ipBlock: { cidr } } };
  }
  if (w.kind === 'host' || w.kind === 'remote-node') {
    return { skip: `${w.name} (${ip}): a NetworkPolicy cannot select a node (traffic from the local node is allowed anyway; to reach a node, a TendrilNetworkPolicy's entities can)` };
  }
  if (w.kind !== 'pod' || w.namespace === undefined) return { skip: `${workloadTitle(w)} (identity ${w.identity}): not a pod, no selector names it` };
  const labels = podLabelsOf(w.labels);
  if (Object.keys(labels).length === 0) return { skip: `${workloadTitle(w)} (identity ${w.identity}): its labels are unknown here, no podSelector would name only it` };
  const peer: NetworkPolicyPeer = { podSelector: { matchLabels: labels } };
  if (w.namespace !== subjectNamespace) peer.namespaceSelector = { matchLabels: { [NAMESPACE_NAME_LABEL]: w.namespace } };
  return { key: w.key, peer };
}

/** The rules of one direction: peers seen on the same set of ports share a rule. */
function rulesOf(seen: Map<string, { peer: NetworkPolicyPeer; ports: Map<string, NetworkPolicyPort> }>, side: 'from' | 'to'): NetworkPolicyRule[] {
  const byPorts = new Map<string, { peers: Array<[string, NetworkPolicyPeer]>; ports: NetworkPolicyPort[] }>();
  for (const [key, s] of seen) {
    const ports = [...s.ports.values()].sort((a, b) => a.protocol.localeCompare(b.protocol) || a.port - b.port);
    const portsKey = ports.map((p) => `${p.protocol}/${p.port}`).join(',');
    let group = byPorts.get(portsKey);
    if (group === undefined) {
      group = { peers: [], ports };
      byPorts.set(portsKey, group);
    }
    group.peers.push([key, s.peer]);
  }
  return [...byPorts.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([, g]) => ({ [side]: g.peers.sort(([a], [b]) => a.localeCompare(b)).map(([, p]) => p), ports: g.ports }) as NetworkPolicyRule);
}

function k8sName(text: string): string {
  const n = text
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 50);
  return n === '' ? 'workload' : n;
}

/**
 * The NetworkPolicy allowing what `flows` show `subjectKey` (a workload key,
 * peer.ts) receiving and sending. Throws SuggestPolicyError when the
 * subject is no pod workload with labels, or no flow of it was seen.
 */
export function suggestPolicy(flows: Iterable<Flow>, subjectKey: string, opts: SuggestPolicyOptions = {}): PolicySuggestion {
  const directions = new Set(opts.directions ?? ['ingress', 'egress']);
  const verdicts = new Set(opts.verdicts ?? DEFAULT_VERDICTS);
  let subject: Workload | undefined;
  const seen = { ingress: new Map(), egress: new Map() } as Record<SuggestDirection, Map<string, { peer: NetworkPolicyPeer; ports: Map<string, NetworkPolicyPort> }>>;
  const notes = new Set<string>();
  let used = 0;
  let first = '';
  let last = '';
  for (const f of flows) {
    const src = workloadOf(f.event.source);
    const dst = workloadOf(f.event.destination);
    const dir: SuggestDirection | undefined = dst.key === subjectKey ? 'ingress' : src.key === subjectKey ? 'egress' : undefined;
    if (dir === undefined) continue;
    const me = dir === 'ingress' ? dst : src;
    if (subject === undefined || (subject.labels.length === 0 && me.labels.length > 0)) subject = me;
    if (!directions.has(dir) || !verdicts.has(f.verdict)) continue;
    // A TCP packet that is no connection's first (a reply or a later segment, traced at --trace-level all) says nothing about who connects to whom.
    const flags = f.event.tcpFlags;
    if (f.event.type === 'trace' && f.event.protocol === 'tcp' && flags !== undefined && flags.length > 0 && !(flags.includes('SYN') && !flags.includes('ACK'))) continue;
    const other = dir === 'ingress' ? src : dst;
    const otherPeer = dir === 'ingress' ? f.event.source : f.event.destination;
    const protocol = PROTOCOLS[f.event.protocol];
    if (protocol === undefined) {
      notes.add(`${f.event.protocol} ${dir === 'ingress' ? 'from' : 'to'} ${workloadTitle(other)}: a NetworkPolicy names TCP, UDP and SCTP ports only, so it is not allowed`);
      continue;
    }
    const named = policyPeer(other, otherPeer.ip, me.namespace ?? '');
    if ('skip' in named) {
      notes.add(`${dir} ${named.skip}`);
      continue;
    }
    let s = seen[dir].get(named.key);
    if (s === undefined) {
      s = { peer: named.peer, ports: new Map() };
      seen[dir].set(named.key, s);
    }
    const port = f.event.destination.port;
    s.ports.set(`${protocol}/${port}`, { protocol, port });
    used++;
    if (first === '' || f.firstTime < first) first = f.firstTime;
    if (f.event.time > last) last = f.event.time;
  }
  if (subject === undefined) throw new SuggestPolicyError(`no flow to or from ${subjectKey} was seen`);
  if (subject.kind !== 'pod' || subject.namespace === undefined) throw new SuggestPolicyError(`${workloadTitle(subject)} is no pod workload: a NetworkPolicy selects pods`);
  const podLabels = podLabelsOf(subject.labels);
  if (Object.keys(podLabels).length === 0) throw new SuggestPolicyError(`${workloadTitle(subject)}: its pod labels are unknown, no podSelector would select only it`);

  const spec: NetworkPolicyDocument['spec'] = { podSelector: { matchLabels: podLabels }, policyTypes: [] };
  for (const dir of ['ingress', 'egress'] as const) {
    if (!directions.has(dir)) continue;
    spec.policyTypes.push(dir === 'ingress' ? 'Ingress' : 'Egress');
    const rules = rulesOf(seen[dir], dir === 'ingress' ? 'from' : 'to');
    if (rules.length > 0) spec[dir] = rules;
    else notes.add(`${dir}: nothing seen, so nothing is allowed`);
  }
  const document: NetworkPolicyDocument = {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { name: opts.name ?? `${k8sName(subject.name)}-observed`, namespace: subject.namespace },
    spec,
  };
  const noteList = [...notes].sort();
  const header = [
    `Suggested from ${used} flow${used === 1 ? '' : 's'} of ${workloadTitle(subject)} (identity ${subject.identity})${used > 0 ? ` seen ${first} – ${last}` : ''}.`,
    'It allows what was seen and nothing else: review it before applying.',
    ...noteList.map((n) => `Not allowed: ${n}`),
  ];
  const yaml = `${header.map((l) => `# ${l}`).join('\n')}\n${stringify(document, { lineWidth: 0 })}`;
  return { subject, document, yaml, notes: noteList, flows: used };
}
