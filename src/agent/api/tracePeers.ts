import { AgentError } from '../../api/errors.js';
import type { EndpointStatus } from '../../endpoint/index.js';
import { type Label, LabelSet, LabelSource, parseLabel, POD_NAMESPACE_LABEL } from '../../labels/index.js';
import type { TracePeer } from '../../policy/index.js';
import type { PolicyTrace } from '../../api/types.js';

/** The namespace a trace's labels are taken in when none is given, as `cilium policy trace` does. */
export const TRACE_DEFAULT_NAMESPACE = 'default';

/** What a trace needs to turn endpoint, pod and identity references into peers. */
export interface TracePeerLookup {
  endpoint(ref: string): EndpointStatus | undefined;
  identityExists(id: number): boolean;
}

export interface ResolvedTracePeers {
  src: TracePeer;
  dst: TracePeer;
  /** What the trace assumed or looked up, said before its verdict. */
  notes: string[];
}

type Side = 'src' | 'dst';

/**
 * A side of a trace names its peer exactly one way. Labels without a pod
 * namespace get `default`: every pod's identity carries its namespace, so a
 * selector of a namespaced policy never matches labels without one, and the
 * trace would answer for a peer no pod can be.
 */
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
    if (labels !== undefined) return labelPeer(s, who, labels, notes);
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

function labelPeer(s: Side, who: string, texts: readonly string[], notes: string[]): TracePeer {
  const parsed: Label[] = [];
  for (const t of texts) {
    if (/^\d+$/.test(t)) throw new AgentError('INVALID_REQUEST', `${who} label "${t}" is a number: for endpoint ${t} use ${s}Endpoint (tendril policy trace --${s}-endpoint ${t})`);
    try {
      parsed.push(parseLabel(t, LabelSource.K8s));
    } catch (err) {
      throw new AgentError('INVALID_REQUEST', `${who} label "${t}": ${(err as Error).message}`, '', undefined, { cause: err });
    }
  }
  let labels = LabelSet.from(parsed);
  // Only a pod's labels carry a namespace: reserved, cidr and other sources' peers are traced as given.
  if (parsed.every((l) => l.source === LabelSource.K8s) && !parsed.some((l) => l.key === POD_NAMESPACE_LABEL)) {
    labels = LabelSet.from([...parsed, parseLabel(`${POD_NAMESPACE_LABEL}=${TRACE_DEFAULT_NAMESPACE}`, LabelSource.K8s)]);
    notes.push(`${who}: no namespace label given, assuming k8s:${POD_NAMESPACE_LABEL}=${TRACE_DEFAULT_NAMESPACE}`);
  }
  notes.push(`${who} labels: ${labels.toStrings().join(' ')}`);
  return { labels };
}
