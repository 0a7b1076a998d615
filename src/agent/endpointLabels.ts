import { AgentError } from '../api/errors.js';
import type { CniArgs, NetConf } from '../cni/index.js';
import {
  LabelError,
  LabelErrorCode,
  LabelSet,
  LabelSource,
  makeLabel,
  parsePodLabel,
  POD_NAMESPACE_LABEL,
  requireNotKubernetesDerived,
  requirePodLabel,
  type Label,
} from '../labels/index.js';

/** Pod identity facts a runtime passes in CNI_ARGS (kubelet's and podman's keys). */
export interface PodRef {
  namespace?: string;
  name?: string;
}

export function podRefFromArgs(args: CniArgs): PodRef {
  const get = (k: string) => args.find(([key]) => key === k)?.[1];
  const namespace = get('K8S_POD_NAMESPACE');
  const name = get('K8S_POD_NAME');
  return { ...(namespace ? { namespace } : {}), ...(name ? { name } : {}) };
}

/** A label text and where it came from, for the error message. */
export interface LabelText {
  text: string;
  from: string;
}

/**
 * The labels a CNI call carries: the CNI_ARGS key TENDRIL_LABELS (`k=v,k2=v2`)
 * and the netconf's `args.tendril.labels` (a list of `k=v` strings or a map).
 */
export function labelTextsFromCni(args: CniArgs, conf: NetConf): LabelText[] {
  const out: LabelText[] = [];
  const fromArgs = args.find(([k]) => k === 'TENDRIL_LABELS')?.[1];
  for (const t of (fromArgs ?? '').split(',').filter((s) => s !== '')) {
    // Go plugins chained after tendril-cni reject a CNI_ARGS value holding '=', so
    // items may be percent-encoded (app%3Dweb); plain app=web works without them.
    let text: string;
    try {
      text = decodeURIComponent(t);
    } catch {
      throw new AgentError('INVALID_REQUEST', `invalid percent-encoding in CNI_ARGS TENDRIL_LABELS item ${JSON.stringify(t)}`);
    }
    out.push({ text, from: 'CNI_ARGS TENDRIL_LABELS' });
  }
  const confLabels = ((conf.args as Record<string, unknown> | undefined)?.tendril as Record<string, unknown> | undefined)?.labels;
  const from = 'netconf args.tendril.labels';
  if (Array.isArray(confLabels)) {
    for (const t of confLabels) {
      if (typeof t !== 'string') throw new AgentError('INVALID_REQUEST', `${from} must hold strings`);
      out.push({ text: t, from });
    }
  } else if (confLabels !== undefined && confLabels !== null) {
    if (typeof confLabels !== 'object') throw new AgentError('INVALID_REQUEST', `${from} must be a list or a map`);
    for (const [k, v] of Object.entries(confLabels)) {
      if (typeof v !== 'string') throw new AgentError('INVALID_REQUEST', `${from}.${k} must be a string`);
      out.push({ text: `${k}=${v}`, from });
    }
  }
  return out;
}

/**
 * An endpoint's labels: the pod namespace as a k8s label plus the given ones.
 * Without a source prefix a label is `k8s:` inside Kubernetes and
 * `container:` outside it. Only sources a pod may carry are accepted
 * (`reserved:host` would make the pod the host), and no key Kubernetes
 * derives (the namespace, its labels, the service account, the cluster: only
 * `pod.namespace` and the API server give those, or a pod in `evil` could
 * claim `team=trusted` of another namespace and pass its namespaceSelector):
 * anything else is INVALID_REQUEST, CNI code 7 like every other invalid
 * label, whether it came from CNI_ARGS, the netconf or the API.
 */
export function endpointLabels(texts: readonly LabelText[], pod: PodRef): LabelSet {
  const labels: Label[] = [];
  if (pod.namespace) labels.push(makeLabel(LabelSource.K8s, POD_NAMESPACE_LABEL, pod.namespace));
  for (const { text, from } of texts) {
    try {
      const label = parsePodLabel(text, pod.namespace);
      requireNotKubernetesDerived(label, from);
      requirePodLabel(label);
      labels.push(label);
    } catch (err) {
      if (err instanceof LabelError && err.code === LabelErrorCode.KEY_DERIVED) throw new AgentError('INVALID_REQUEST', `refused: ${err.message}; nothing was created`);
      if (err instanceof LabelError && err.code === LabelErrorCode.SOURCE_NOT_ALLOWED) throw new AgentError('INVALID_REQUEST', `${from} refused: ${err.message}`);
      if (err instanceof LabelError) throw new AgentError('INVALID_REQUEST', `invalid label ${JSON.stringify(text)} in ${from}: ${err.message}`);
      throw err;
    }
  }
  return LabelSet.from(labels);
}
