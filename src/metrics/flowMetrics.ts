/**
 * Flow metrics (Hubble metrics' role): every datapath event the monitor hub
 * reads is counted here, from its header and what its numbers meant (never
 * a built event), whether or not the flow history keeps it. Three
 * counters: flows by type and verdict, drops by reason and direction, and
 * policy verdicts by direction, verdict and the rule that decided; with
 * `--flow-metrics-labels namespace` (or `workload`) each also carries the
 * source's and destination's namespace (and workload: the app label, else
 * the pod's name less its ReplicaSet and pod suffixes). Never a pod IP.
 *
 * Cost per event: an event finds its counting cell through small maps keyed
 * by what it already carries (the type and verdict by index, a drop by its
 * code, a verdict by its rule text), and adds 1 to a number; prom-client's
 * own label handles hash their label object on every inc, so the counters
 * are filled from the cells at scrape time instead.
 *
 * The label values a rule text or a workload context can take are bounded:
 * past `cap` distinct rule texts (or context tuples) since start, a new one
 * is counted under `other`, and each event so folded is counted in
 * `tendril_flow_metrics_folded_total{label}`, so a dashboard knows the cap
 * was reached.
 */
import { Counter, type Registry } from 'prom-client';
import { dropReasonName } from '../datapath/bpf/constants.js';
import { FLOW_VERDICTS, type FlowVerdict, flowVerdictOfHeader } from '../flow/index.js';
import { directionOf, EVENT_TYPE_NAMES, type EventRefs, MONITOR_EVENT_TYPES, type MonitorEventType, type PodRef, type RecordHeader } from '../monitor/index.js';

/** Which workload labels flow metrics carry: none, the peers' namespaces, or namespaces and workloads. */
export const FLOW_METRICS_LABELS = ['none', 'namespace', 'workload'] as const;
export type FlowMetricsLabels = (typeof FLOW_METRICS_LABELS)[number];

/** Distinct rule texts, and distinct workload contexts, counted under their own label values before the rest fold into `other`. */
export const FLOW_METRICS_DEFAULT_CAP = 1000;

/** The label value the values past the cap fold into. */
export const FOLDED_VALUE = 'other';

const DIRECTIONS = ['ingress', 'egress', 'none'] as const;
const TYPE_INDEX = new Map<MonitorEventType, number>(MONITOR_EVENT_TYPES.map((t, i) => [t, i]));
const VERDICT_INDEX = new Map<FlowVerdict, number>(FLOW_VERDICTS.map((v, i) => [v, i]));
const DIRECTION_INDEX = new Map<string, number>(DIRECTIONS.map((d, i) => [d, i]));

/** One series' count, with its labels built once. */
interface Cell {
  readonly labels: Record<string, string>;
  value: number;
}

/** A rule's verdict cells, by direction index × verdicts + verdict index. */
interface RuleCells {
  /** The rule label's value: the rule text, or `other`. */
  readonly rule: string;
  readonly cells: Array<Cell | undefined>;
}

/** The cells of one workload context (the only one without context labels). */
interface ContextCells {
  readonly labels: Readonly<Record<string, string>>;
  /** By type index × verdicts + verdict index. */
  readonly processed: Array<Cell | undefined>;
  /** By drop code × directions + direction index. */
  readonly drops: Map<number, Cell>;
  /** By rule text, the texts let in only (a map that never grows past the cap). */
  readonly verdicts: Map<string, RuleCells>;
  /** The rules past the cap. */
  foldedRules?: RuleCells;
}

/** Label keys whose values the app's workload name comes from, first found wins. */
const APP_LABEL_KEYS = ['app.kubernetes.io/name', 'app', 'k8s-app'];
const NAMESPACE_LABEL_KEY = 'io.kubernetes.pod.namespace';
/** Kubernetes' generated name suffixes use this alphabet (no vowels, no 0, 1, 3). */
const POD_SUFFIX = /-[bcdfghjklmnpqrstvwxz2456789]{5}$/;
const REPLICASET_SUFFIX = /-[bcdfghjklmnpqrstvwxz2456789]{6,10}$/;
const ORDINAL_SUFFIX = /-\d+$/;

/** The workload a pod's name belongs to: its Deployment's or DaemonSet's name (generated suffixes off), a StatefulSet's (ordinal off). */
export function workloadOfPodName(name: string): string {
  if (ORDINAL_SUFFIX.test(name)) return name.replace(ORDINAL_SUFFIX, '');
  const base = name.replace(POD_SUFFIX, '');
  return base === name ? name : base.replace(REPLICASET_SUFFIX, '');
}

/** A label's value by key, whatever its source (`k8s:app=web` → `web` for `app`). */
function labelValue(labels: readonly string[], keys: readonly string[]): string | undefined {
  for (const key of keys) {
    for (const l of labels) {
      const colon = l.indexOf(':');
      if (l.startsWith(key, colon + 1) && l.charCodeAt(colon + 1 + key.length) === 61 /* = */) return l.slice(colon + 2 + key.length);
    }
  }
  return undefined;
}

/** A peer's namespace and workload, as the context labels say them ('' for a peer that is no pod: the host, the world). */
export function peerContext(labels: readonly string[], pod: PodRef | undefined): { namespace: string; workload: string } {
  const namespace = pod?.namespace ?? labelValue(labels, [NAMESPACE_LABEL_KEY]) ?? '';
  const workload = labelValue(labels, APP_LABEL_KEYS) ?? (pod ? workloadOfPodName(pod.name) : '');
  return { namespace, workload };
}

const NO_LABELS: readonly string[] = [];

export interface FlowMetricsOptions {
  labels: FlowMetricsLabels;
  /** Distinct rule texts and contexts before folding (default 1000). */
  cap?: number;
}

export class FlowMetrics {
  readonly #labels: FlowMetricsLabels;
  readonly #cap: number;
  /** The contexts let in, by their label values joined; never more than the cap. */
  readonly #contexts = new Map<string, ContextCells>();
  #foldedContext: ContextCells | undefined;
  /** The single context when no context labels are asked for. */
  readonly #plain: ContextCells | undefined;
  /** The rule texts let in, whatever the context. */
  readonly #rules = new Set<string>();
  readonly #folded = { rule: 0, context: 0 };

  constructor(registry: Registry, opts: FlowMetricsOptions) {
    this.#labels = opts.labels;
    this.#cap = opts.cap ?? FLOW_METRICS_DEFAULT_CAP;
    if (!Number.isInteger(this.#cap) || this.#cap < 1) throw new RangeError(`flow metrics label cap must be a positive integer, got ${this.#cap}`);
    this.#plain = this.#labels === 'none' ? newContext({}) : undefined;
    const contextLabelNames = this.#labels === 'none' ? [] : this.#labels === 'namespace' ? NAMESPACE_LABELS : [...NAMESPACE_LABELS, ...WORKLOAD_LABELS];
    const registers = [registry];
    const contexts = (): Iterable<ContextCells> => {
      if (this.#plain) return [this.#plain];
      const all = [...this.#contexts.values()];
      if (this.#foldedContext) all.push(this.#foldedContext);
      return all;
    };
    const fromCells = (name: string, help: string, labelNames: readonly string[], cells: (c: ContextCells) => Iterable<Cell | undefined>) =>
      new Counter({
        name,
        help,
        labelNames: [...labelNames, ...contextLabelNames],
        registers,
        collect() {
          // The cells are the counts; each scrape copies them in.
          this.reset();
          for (const c of contexts()) for (const cell of cells(c)) if (cell) this.inc(cell.labels, cell.value);
        },
      });
    fromCells('tendril_flows_processed_total', 'Datapath events (flows) the agent decoded, by event type (drop, policy-verdict, trace) and flow verdict', ['type', 'verdict'], (c) => c.processed);
    fromCells('tendril_flow_drops_total', 'Drop events, by drop reason and direction', ['reason', 'direction'], (c) => c.drops.values());
    fromCells(
      'tendril_policy_verdicts_total',
      `Policy verdict events, by direction, flow verdict and the rule that decided (past ${this.#cap} distinct rules, rule="${FOLDED_VALUE}")`,
      ['direction', 'verdict', 'rule'],
      function* (c) {
        for (const r of c.verdicts.values()) yield* r.cells;
        if (c.foldedRules) yield* c.foldedRules.cells;
      },
    );
    const folded = this.#folded;
    new Counter({
      name: 'tendril_flow_metrics_folded_total',
      help: `Flow events whose rule (label="rule") or workload context (label="context") was counted under "${FOLDED_VALUE}": ${this.#cap} distinct values were in use already`,
      labelNames: ['label'],
      registers,
      collect() {
        this.reset();
        this.inc({ label: 'rule' }, folded.rule);
        if (contextLabelNames.length > 0) this.inc({ label: 'context' }, folded.context);
      },
    });
  }

  /** Counts one event (the monitor hub's recorder): its header and what its numbers meant. */
  record(_record: Buffer, h: Readonly<RecordHeader>, refs: Readonly<EventRefs>): void {
    const type = EVENT_TYPE_NAMES[h.type];
    if (type === undefined) return;
    const ti = TYPE_INDEX.get(type)!;
    const verdict = flowVerdictOfHeader(h);
    const vi = VERDICT_INDEX.get(verdict)!;
    const ctx = this.#plain ?? this.#contextOf(refs);
    const processed = (ctx.processed[ti * FLOW_VERDICTS.length + vi] ??= { labels: { ...ctx.labels, type, verdict }, value: 0 });
    processed.value++;
    const di = DIRECTION_INDEX.get(directionOf(h.direction)) ?? DIRECTIONS.length - 1;
    if (type === 'drop') {
      const key = h.subtype * DIRECTIONS.length + di;
      let drop = ctx.drops.get(key);
      if (drop === undefined) {
        drop = { labels: { ...ctx.labels, reason: dropReasonName(h.subtype) ?? `UNKNOWN_${h.subtype}`, direction: DIRECTIONS[di]! }, value: 0 };
        ctx.drops.set(key, drop);
      }
      drop.value++;
    } else if (type === 'policy-verdict') {
      const text = refs.rule?.text ?? '';
      let rule = ctx.verdicts.get(text);
      if (rule === undefined) {
        if (this.#admitRule(text)) {
          rule = { rule: text, cells: [] };
          ctx.verdicts.set(text, rule);
        } else {
          this.#folded.rule++;
          rule = ctx.foldedRules ??= { rule: FOLDED_VALUE, cells: [] };
        }
      }
      const cell = (rule.cells[di * FLOW_VERDICTS.length + vi] ??= { labels: { ...ctx.labels, direction: DIRECTIONS[di]!, verdict, rule: rule.rule }, value: 0 });
      cell.value++;
    }
  }

  /** Whether a rule text gets a label value of its own: it has one, or fewer than `cap` texts have. */
  #admitRule(text: string): boolean {
    if (this.#rules.has(text)) return true;
    if (this.#rules.size >= this.#cap) return false;
    this.#rules.add(text);
    return true;
  }

  #contextOf(refs: Readonly<EventRefs>): ContextCells {
    const s = peerContext(refs.srcLabels ?? NO_LABELS, refs.srcPod);
    const d = peerContext(refs.dstLabels ?? NO_LABELS, refs.dstPod);
    const workload = this.#labels === 'workload';
    const key = workload ? `${s.namespace}\0${d.namespace}\0${s.workload}\0${d.workload}` : `${s.namespace}\0${d.namespace}`;
    let ctx = this.#contexts.get(key);
    if (ctx !== undefined) return ctx;
    if (this.#contexts.size >= this.#cap) {
      this.#folded.context++;
      const o = FOLDED_VALUE;
      return (this.#foldedContext ??= newContext(contextLabels(workload, { namespace: o, workload: o }, { namespace: o, workload: o })));
    }
    ctx = newContext(contextLabels(workload, s, d));
    this.#contexts.set(key, ctx);
    return ctx;
  }
}

const NAMESPACE_LABELS = ['source_namespace', 'destination_namespace'] as const;
const WORKLOAD_LABELS = ['source_workload', 'destination_workload'] as const;

function contextLabels(workload: boolean, s: { namespace: string; workload: string }, d: { namespace: string; workload: string }): Record<string, string> {
  const labels: Record<string, string> = { source_namespace: s.namespace, destination_namespace: d.namespace };
  if (workload) {
    labels.source_workload = s.workload;
    labels.destination_workload = d.workload;
  }
  return labels;
}

function newContext(labels: Record<string, string>): ContextCells {
  return { labels, processed: [], drops: new Map(), verdicts: new Map() };
}
