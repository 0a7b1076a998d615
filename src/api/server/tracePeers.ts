import { AgentError } from '../errors.js';
import type { EndpointStatus } from '../../endpoint/index.js';
import { type Label, LabelSet, parsePodLabel, POD_NAMESPACE_LABEL, podLabelDefaultSource } from '../../labels/index.js';
import type { TracePeer } from '../../policy/index.js';
import type { PolicyTrace } from '../types.js';

/** What a trace needs to turn endpoint, pod and identity references into peers. */
export interface TracePeerLookup {
  endpoint(ref: string): EndpointStatus | undefined;
  identityExists(id: number): boolean;
  /** The local endpoints whose labels are exactly these, for the trace's notes. */
  endpointsWithLabels?(labels: LabelSet): number[];
}

export interface ResolvedTracePeers {
  src: TracePeer;
  dst: TracePeer;
  /** What the trace assumed or looked up, said before its verdict. */
  notes: string[];
}

type Side = 'src' | 'dst';

/** A side of a trace names its peer exactly one way. */
export function resolveTracePeers(body: PolicyTrace, lookup: TracePeerLookup): ResolvedTracePeers {
  const notes: string[] = [];
  const side = (s: Side): TracePeer => {
    const labels = body[s];
    const endpoint = body[`${s}Endpoint`];
    const pod = body[`${s}Pod`];
    const identity = body[`${s}Identity`];
    const given = [labels, endpoint, pod, identity].filter((v) => v !== undefined).length;
    const who = s === 'src' ? 'source' : 'destination';
    if (given !== 1) {
      throw new AgentError('INVALID_REQUEST', `give the ${who} exactly one way: ${s} (labels), ${s}Endpoint, ${s}Pod or ${s}Identity (got ${given})`);
    }
    if (labels !== undefined) return labelPeer(s, who, labels, notes, lookup);
    if (identity !== undefined) {
      if (!lookup.identityExists(identity)) throw new AgentError('NOT_FOUND', `${who} identity ${identity} not found`);
      return { identity };
    }
    const ref = endpoint !== undefined ? String(endpoint) : podRef(who, pod!);
    const ep = lookup.endpoint(ref);
    if (!ep) throw new AgentError('NOT_FOUND', `${who} ${endpoint !== undefined ? `endpoint ${endpoint}` : `pod ${pod}`} has no endpoint on this node`);
    notes.push(`${who}: endpoint ${ep.id}${ep.podName ? ` (pod ${ep.podNamespace ?? ''}/${ep.podName})` : ''}, identity ${ep.identity ?? '-'}`);
    return { endpoint: ep.id };
  };
  return { src: side('src'), dst: side('dst'), notes };
}

function podRef(who: string, pod: string): string {
  const m = /^([^/\s]+)\/([^/\s]+)$/.exec(pod);
  if (!m) throw new AgentError('INVALID_REQUEST', `${who} pod "${pod}": use <namespace>/<name>`);
  return `pod-name:${m[1]}:${m[2]}`;
}

/**
 * A side given as labels is resolved exactly as an endpoint with those
 * labels would be (parsePodLabel, the CNI and labels-API path): with a pod
 * namespace (`io.kubernetes.pod.namespace=<ns>`) labels without a source are
 * `k8s:`, without one `container:` — what TENDRIL_LABELS gives a container
 * that has no K8S_POD_NAMESPACE. A label with a source (`k8s:app=web`,
 * `reserved:world`, `cidr:10.0.0.0/8`) is taken as given.
 */
function labelPeer(s: Side, who: string, texts: readonly string[], notes: string[], lookup: TracePeerLookup): TracePeer {
  const parse = (t: string, namespace: string | undefined): Label => {
    try {
      return parsePodLabel(t, namespace);
    } catch (err) {
      throw new AgentError('INVALID_REQUEST', `${who} label "${t}": ${(err as Error).message}`, '', undefined, { cause: err });
    }
  };
  for (const t of texts) {
    if (/^\d+$/.test(t)) throw new AgentError('INVALID_REQUEST', `${who} label "${t}" is a number: for endpoint ${t} use ${s}Endpoint (tendril policy trace --${s}-endpoint ${t})`);
  }
  // The namespace decides the other labels' source, as K8S_POD_NAMESPACE does for an endpoint.
  const namespaces = texts.map((t) => parse(t, undefined)).filter((l) => l.key === POD_NAMESPACE_LABEL);
  const namespace = namespaces[0]?.value;
  const labels = LabelSet.from(texts.map((t) => parse(t, namespace)));
  const source = podLabelDefaultSource(namespace);
  notes.push(
    namespace === undefined
      ? `${who}: no ${POD_NAMESPACE_LABEL} label, so labels without a source are ${source}:, as on a container without K8S_POD_NAMESPACE (a NetworkPolicy selects only k8s: labels of its namespace; for a pod give ${POD_NAMESPACE_LABEL}=<ns> or --${s}-k8s-pod)`
      : `${who}: pod namespace ${namespace}, so labels without a source are ${source}:`,
  );
  notes.push(`${who} labels: ${labels.toStrings().join(' ')}`);
  const same = lookup.endpointsWithLabels?.(labels) ?? [];
  if (lookup.endpointsWithLabels) notes.push(same.length > 0 ? `${who}: the labels of endpoint ${same.join(', ')}` : `${who}: no endpoint on this node has exactly these labels`);
  return { labels };
}
