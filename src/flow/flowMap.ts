/**
 * The flow map: flows aggregated into workloads (peer.ts workloadOf) and
 * edges, one per source workload, destination workload and verdict, with the
 * flows' counts summed. 10,000 flows make at most as many edges, usually a
 * few hundred, so the UI draws edges, never flows. Pure: bundled into the UI.
 */
import type { MonitorPeer } from '../monitor/types.js';
import { type Workload, workloadOf } from './peer.js';
import type { Flow, FlowVerdict } from './types.js';

export interface FlowEdge {
  /** `<from key>→<to key>|<verdict>`. */
  key: string;
  from: string;
  to: string;
  verdict: FlowVerdict;
  /** The flows' counts, summed (events the datapath reported). */
  count: number;
  /** How many flows of the history went into it. */
  flows: number;
  /** `tcp/80`-style destination ports and their counts. */
  ports: Map<string, number>;
  /** The deciding rules' texts and their counts (policy verdicts and drops). */
  rules: Map<string, number>;
}

export interface FlowMap {
  /** Every workload an edge touches, by key. */
  workloads: Map<string, Workload>;
  edges: FlowEdge[];
  /** The pods' namespaces, sorted. */
  namespaces: string[];
}

function portText(f: Flow): string {
  const e = f.event;
  return e.protocol === 'tcp' || e.protocol === 'udp' || e.protocol === 'sctp' ? `${e.protocol}/${e.destination.port}` : e.protocol;
}

function bump(m: Map<string, number>, k: string, n: number): void {
  m.set(k, (m.get(k) ?? 0) + n);
}

/**
 * The map of `flows`; with `namespace`, only the flows with a side in it
 * (their peers outside it stay, as the one-namespace view shows them).
 */
export function buildFlowMap(flows: Iterable<Flow>, opts: { namespace?: string } = {}): FlowMap {
  const workloads = new Map<string, Workload>();
  const edges = new Map<string, FlowEdge>();
  const namespaces = new Set<string>();
  // One identity's peers resolve to the same workload: resolve each once (10,000 flows, a few hundred identities).
  const resolved = new Map<string, Workload>();
  const workload = (p: MonitorPeer): Workload => {
    const k = `${p.identity}|${p.labels.length}|${p.pod?.namespace ?? ''}/${p.pod?.name ?? ''}`;
    let w = resolved.get(k);
    if (w === undefined) {
      w = workloadOf(p);
      resolved.set(k, w);
    }
    return w;
  };
  const keep = (w: Workload): Workload => {
    const held = workloads.get(w.key);
    if (held === undefined || (held.labels.length === 0 && w.labels.length > 0)) workloads.set(w.key, w);
    return workloads.get(w.key)!;
  };
  for (const f of flows) {
    const src = workload(f.event.source);
    const dst = workload(f.event.destination);
    if (opts.namespace !== undefined && src.namespace !== opts.namespace && dst.namespace !== opts.namespace) continue;
    keep(src);
    keep(dst);
    for (const w of [src, dst]) if (w.namespace !== undefined) namespaces.add(w.namespace);
    const key = `${src.key}→${dst.key}|${f.verdict}`;
    let edge = edges.get(key);
    if (edge === undefined) {
      edge = { key, from: src.key, to: dst.key, verdict: f.verdict, count: 0, flows: 0, ports: new Map(), rules: new Map() };
      edges.set(key, edge);
    }
    edge.count += f.count;
    edge.flows++;
    bump(edge.ports, portText(f), f.count);
    if (f.event.rule) bump(edge.rules, f.event.rule.text, f.count);
  }
  return { workloads, edges: [...edges.values()], namespaces: [...namespaces].sort() };
}
