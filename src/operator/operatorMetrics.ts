/**
 * tendril-operator's Prometheus metrics: its own prom-client Registry (two
 * operators in one test process never share counters). Events are counted as
 * they happen; leadership and the pools' occupancy are read at scrape time.
 */
import { Counter, Gauge, Registry } from 'prom-client';

export type EndpointGcReason = 'pod-gone' | 'node-gone';

export interface OperatorMetricsSources {
  isLeader(): boolean;
  /** CIDRs handed out of the cluster pools, by family (empty when no pool is configured or not leading). */
  cidrsAllocated(): { 4: number; 6: number } | undefined;
  /** Each followed resource's watch restarts after an error (the informers' count). */
  watchRestarts(): { resource: string; restarts: number }[];
}

export class OperatorMetrics {
  readonly registry = new Registry();
  readonly #identities: Counter;
  readonly #endpoints: Counter<'reason'>;
  readonly #exhausted: Counter<'family'>;
  readonly #apiErrors: Counter<'operation'>;
  readonly #transitions: Counter;
  #sources: OperatorMetricsSources | undefined;

  constructor() {
    const registers = [this.registry];
    const sources = () => this.#sources;
    new Gauge({
      name: 'tendril_operator_is_leader',
      help: '1 while this operator holds the leader lease and runs the controllers, else 0',
      registers,
      collect() {
        this.set(sources()?.isLeader() === true ? 1 : 0);
      },
    });
    this.#transitions = new Counter({ name: 'tendril_operator_leadership_acquired_total', help: 'Times this operator became the leader', registers });
    this.#identities = new Counter({
      name: 'tendril_operator_identities_collected_total',
      help: 'TendrilIdentity objects deleted because no TendrilEndpoint named them for longer than the grace period',
      registers,
    });
    this.#endpoints = new Counter({
      name: 'tendril_operator_endpoints_collected_total',
      help: 'TendrilEndpoint objects deleted, by reason: their pod is gone (or is another pod now), or their node is gone',
      labelNames: ['reason'],
      registers,
    });
    new Gauge({
      name: 'tendril_operator_cidrs_allocated',
      help: 'Per-node CIDRs handed out of the cluster pools, by family',
      labelNames: ['family'],
      registers,
      collect() {
        this.reset();
        const c = sources()?.cidrsAllocated();
        if (c === undefined) return;
        this.set({ family: 'ipv4' }, c[4]);
        this.set({ family: 'ipv6' }, c[6]);
      },
    });
    this.#exhausted = new Counter({
      name: 'tendril_operator_cidr_pool_exhausted_total',
      help: 'Times a TendrilNode found no free per-node CIDR of a family in the cluster pools (it waits for one to come free)',
      labelNames: ['family'],
      registers,
    });
    this.#apiErrors = new Counter({
      name: 'tendril_operator_api_errors_total',
      help: 'Kubernetes API requests of the operator that failed (conflicts it resolves by re-reading are not counted), by operation',
      labelNames: ['operation'],
      registers,
    });
    new Counter({
      name: 'tendril_operator_watch_restarts_total',
      help: 'Watches of the followed resources restarted after an error (a lost connection, a resource the server does not serve), by resource',
      labelNames: ['resource'],
      registers,
      collect() {
        this.reset();
        for (const { resource, restarts } of sources()?.watchRestarts() ?? []) this.inc({ resource }, restarts);
      },
    });
    for (const reason of ['pod-gone', 'node-gone'] as const) this.#endpoints.inc({ reason }, 0);
    for (const family of ['ipv4', 'ipv6']) this.#exhausted.inc({ family }, 0);
  }

  bind(sources: OperatorMetricsSources): void {
    this.#sources = sources;
  }

  render(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  leadershipAcquired(): void {
    this.#transitions.inc();
  }

  identityCollected(): void {
    this.#identities.inc();
  }

  endpointCollected(reason: EndpointGcReason): void {
    this.#endpoints.inc({ reason });
  }

  poolExhausted(family: 4 | 6): void {
    this.#exhausted.inc({ family: `ipv${family}` });
  }

  apiError(operation: string): void {
    this.#apiErrors.inc({ operation });
  }
}
