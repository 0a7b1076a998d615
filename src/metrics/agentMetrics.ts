/**
 * The agent's Prometheus metrics: one prom-client Registry owned by the agent
 * (never the library's global one, so two agents in one process, as tests
 * run them, never share counters). Events are counted as they happen (CNI
 * calls, regenerations, kvstore operations); state is read from its owner at
 * scrape time (endpoints, identities, IPAM, policy, the deletion queue, the
 * eBPF datapath), so a scrape never sees a copy that has drifted.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { ENDPOINT_STATES } from '../endpoint/index.js';
import { DatapathMetrics, type DatapathMetricsSource } from './datapathMetrics.js';
import { FlowMetrics, type FlowMetricsOptions } from './flowMetrics.js';

/** Seconds: a CNI call or a regeneration takes milliseconds when all is well, and tens of seconds at worst. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** The CNI verbs the agent serves; anything else is counted as `other` so a label never grows without bound. */
export const CNI_VERBS = ['ADD', 'DEL', 'CHECK', 'GC', 'STATUS', 'VERSION'] as const;

export type OperationResult = 'success' | 'error';

/** One allocation as the IPAM provider lists it: only what the metrics group by. */
export interface IpamAllocationView {
  pool: string;
  family: 4 | 6;
}

/** What the agent's subsystems tell the registry at scrape time. Each is read on every scrape. */
export interface AgentMetricsSources {
  /** Every local endpoint's state. */
  endpointStates(): readonly string[];
  /** Identities: reserved ones and those this node holds. */
  identities(): { reserved: number; allocated: number };
  /** Every allocation of this node (router addresses included). */
  ipamAllocations(): Promise<readonly IpamAllocationView[]>;
  /** The CIDRs this node's pods are numbered from (none with delegated IPAM). */
  ipamPodCidrs(): readonly string[];
  /** The policy revision the node is at. */
  policyRevision(): number;
  /** Policies the kvstore lost that the datapath still enforces (kept from the state dir until confirmed or re-imported). */
  policiesLost?(): number;
  /** Deletions tendril-cni queued while the agent was unreachable, waiting to run. */
  deletionQueueDepth(): Promise<number>;
  /** The eBPF datapath's pinned maps; absent without them. */
  datapath?: DatapathMetricsSource;
  /** The ipcache map's failed writes (retried until they land) and the prefixes still waiting; undefined without the map. */
  ipcacheMapWrites?(): { readonly failed: number; readonly pending: number } | undefined;
}

/** Addresses a CIDR holds (`10.0.0.0/24` → 256); IPv6 ranges past 2^53 read as that. */
export function cidrSize(cidr: string): number {
  const slash = cidr.lastIndexOf('/');
  const bits = cidr.includes(':') ? 128 : 32;
  const len = Number(cidr.slice(slash + 1));
  if (slash < 0 || !Number.isInteger(len) || len < 0 || len > bits) return 0;
  return Math.min(2 ** (bits - len), Number.MAX_SAFE_INTEGER);
}

export class AgentMetrics {
  readonly registry = new Registry();
  #sources: AgentMetricsSources | undefined;
  readonly #cniOps: Counter<'verb' | 'result'>;
  readonly #cniSeconds: Histogram<'verb' | 'result'>;
  readonly #regenSeconds: Histogram<'result'>;
  readonly #kvOps: Counter<'operation' | 'result'>;
  /** Counts every datapath event the monitor decodes; absent when flow metrics are off. */
  readonly flows: FlowMetrics | undefined;

  constructor(opts: { flows?: FlowMetricsOptions } = {}) {
    const registers = [this.registry];
    // The process's own figures (resident memory, V8 heap by space, external memory, event loop lag, CPU), under
    // prom-client's standard names behind tendril_agent_: what the agent costs a node, as Cilium's agent exports its Go runtime's.
    collectDefaultMetrics({ register: this.registry, prefix: 'tendril_agent_' });
    this.flows = opts.flows ? new FlowMetrics(this.registry, opts.flows) : undefined;
    this.#cniOps = new Counter({ name: 'tendril_cni_operations_total', help: 'CNI calls the agent handled, by verb and result', labelNames: ['verb', 'result'], registers });
    this.#cniSeconds = new Histogram({
      name: 'tendril_cni_operation_duration_seconds',
      help: 'How long the agent took to handle a CNI call, by verb and result',
      labelNames: ['verb', 'result'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#regenSeconds = new Histogram({
      name: 'tendril_endpoint_regeneration_duration_seconds',
      help: 'How long an endpoint regeneration took to put identity, addresses and policy in force, by result',
      labelNames: ['result'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#kvOps = new Counter({ name: 'tendril_kvstore_operations_total', help: 'kvstore operations the agent made, by operation and result (errors: result="error")', labelNames: ['operation', 'result'], registers });

    const sources = () => this.#sources;
    new Gauge({
      name: 'tendril_endpoint_state',
      help: 'Local endpoints by state',
      labelNames: ['state'],
      registers,
      collect() {
        const s = sources();
        if (!s) return;
        const counts = new Map<string, number>(ENDPOINT_STATES.map((st) => [st, 0]));
        for (const st of s.endpointStates()) counts.set(st, (counts.get(st) ?? 0) + 1);
        for (const [state, n] of counts) this.set({ state }, n);
      },
    });
    new Gauge({
      name: 'tendril_identities',
      help: 'Security identities: reserved ones and those this node holds',
      labelNames: ['type'],
      registers,
      collect() {
        const s = sources();
        if (!s) return;
        const { reserved, allocated } = s.identities();
        this.set({ type: 'reserved' }, reserved);
        this.set({ type: 'allocated' }, allocated);
      },
    });
    new Gauge({
      name: 'tendril_ipam_allocations',
      help: 'Addresses this node holds, router addresses included, by pool and family',
      labelNames: ['pool', 'family'],
      registers,
      async collect() {
        const s = sources();
        if (!s) return;
        const counts = new Map<string, { pool: string; family: string; n: number }>();
        for (const a of await s.ipamAllocations()) {
          const key = `${a.pool}\0${a.family}`;
          const c = counts.get(key) ?? { pool: a.pool, family: `ipv${a.family}`, n: 0 };
          c.n++;
          counts.set(key, c);
        }
        // A pool emptied since the last scrape reads 0 rather than keeping its old value.
        this.reset();
        for (const { pool, family, n } of counts.values()) this.set({ pool, family }, n);
      },
    });
    new Gauge({
      name: 'tendril_ipam_capacity',
      help: 'Addresses in each CIDR this node\'s pods are numbered from',
      labelNames: ['cidr'],
      registers,
      collect() {
        const s = sources();
        if (!s) return;
        this.reset();
        for (const cidr of s.ipamPodCidrs()) this.set({ cidr }, cidrSize(cidr));
      },
    });
    new Gauge({
      name: 'tendril_policy_revision',
      help: 'The policy revision this node is at',
      registers,
      collect() {
        const s = sources();
        if (s) this.set(s.policyRevision());
      },
    });
    new Gauge({
      name: 'tendril_policy_lost_policies',
      help: 'Policies the kvstore lost that this node still enforces, kept from its state dir until an operator re-imports them or confirms the loss (tendril policy confirm-loss)',
      registers,
      collect() {
        const s = sources();
        if (s) this.set(s.policiesLost?.() ?? 0);
      },
    });
    new Gauge({
      name: 'tendril_deletion_queue_depth',
      help: 'CNI deletions queued by tendril-cni while the agent was unreachable, not run yet',
      registers,
      async collect() {
        const s = sources();
        if (s) this.set(await s.deletionQueueDepth());
      },
    });
    new Counter({
      name: 'tendril_ipcache_map_write_failures_total',
      help: 'Writes and deletes of the datapath ipcache map that failed (a full map); each is retried until it lands, retries are not counted again',
      registers,
      collect() {
        const w = sources()?.ipcacheMapWrites?.();
        this.reset();
        if (w) this.inc(w.failed);
      },
    });
    new Gauge({
      name: 'tendril_ipcache_map_writes_pending',
      help: 'Prefixes whose datapath ipcache map write or delete failed and waits for its retry: until it lands, packets of that prefix may be classified by an older identity',
      registers,
      collect() {
        const w = sources()?.ipcacheMapWrites?.();
        if (w) this.set(w.pending);
      },
    });
    new DatapathMetrics(this.registry, () => this.#sources?.datapath);
  }

  /** The subsystems to read at scrape time; until bound, the state metrics are empty. */
  bind(sources: AgentMetricsSources): void {
    this.#sources = sources;
  }

  /** The exposition text (Prometheus text format 0.0.4). */
  render(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  observeCni(verb: string, result: OperationResult, seconds: number): void {
    const labels = { verb: (CNI_VERBS as readonly string[]).includes(verb) ? verb : 'other', result };
    this.#cniOps.inc(labels);
    this.#cniSeconds.observe(labels, seconds);
  }

  observeRegeneration(result: OperationResult, seconds: number): void {
    this.#regenSeconds.observe({ result }, seconds);
  }

  countKvstore(operation: string, result: OperationResult): void {
    this.#kvOps.inc({ operation, result });
  }
}

/** A CNI handler whose calls are counted and timed by verb and result. */
export function countedCni<Req extends { command: string }, Res>(handler: { handle(req: Req): Promise<Res> }, metrics: AgentMetrics): { handle(req: Req): Promise<Res> } {
  return {
    handle: async (req) => {
      const started = performance.now();
      try {
        const out = await handler.handle(req);
        metrics.observeCni(req.command, 'success', (performance.now() - started) / 1000);
        return out;
      } catch (err) {
        metrics.observeCni(req.command, 'error', (performance.now() - started) / 1000);
        throw err;
      }
    },
  };
}
