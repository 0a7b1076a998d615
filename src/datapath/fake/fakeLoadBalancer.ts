import { DatapathError, type LbBackendEntry, type LbServiceEntry, type LoadBalancerDatapath } from '../types.js';

export type FakeLoadBalancerOp = keyof LoadBalancerDatapath;

export interface FakeLoadBalancerOptions {
  /** Like the maps' max_entries: a write beyond them fails as the kernel's would (E2BIG/ENOSPC). */
  maxServices?: number;
  maxBackends?: number;
}

/**
 * An in-memory LoadBalancerDatapath for tests that need no packets. It
 * holds the maps' contents and refuses what the real maps would make
 * inconsistent: a service whose slots name a backend that is not there, a
 * backend deleted while a slot still names it, a frontend written twice
 * under two IDs. Failures can be injected per operation.
 */
export class FakeLoadBalancer implements LoadBalancerDatapath {
  readonly backends = new Map<number, LbBackendEntry>();
  readonly services = new Map<number, LbServiceEntry>();
  /** Every call in order. */
  readonly calls: Array<{ op: FakeLoadBalancerOp; ids: number[] }> = [];
  /** Backend IDs deleteBackends (or restoreDone) removed, in order. */
  readonly deletedBackends: number[] = [];
  /** The arguments of the last restoreDone. */
  restored: { services: number[]; backends: number[] } | undefined;
  readonly #failures = new Map<FakeLoadBalancerOp, Array<{ err: Error; skip: number }>>();
  /** Frontend (`address:port/PROTO`) → the service ID holding it. */
  readonly #frontends = new Map<string, number>();

  constructor(private readonly options: FakeLoadBalancerOptions = {}) {}

  /** The next call of `op` (after `skip` that succeed) fails with `err` (queued: call twice to fail two calls). */
  failNext(op: FakeLoadBalancerOp, err: Error = new DatapathError('failed', `fake: injected failure of ${op}`), skip = 0): void {
    const list = this.#failures.get(op) ?? [];
    list.push({ err, skip });
    this.#failures.set(op, list);
  }

  async upsertBackends(backends: readonly LbBackendEntry[]): Promise<void> {
    this.#enter('upsertBackends', backends.map((b) => b.id));
    const added = backends.filter((b) => !this.backends.has(b.id)).length;
    if (this.options.maxBackends !== undefined && this.backends.size + added > this.options.maxBackends) {
      throw new DatapathError('failed', `fake: ${'tendril_lb4_be'} is full (${this.options.maxBackends} entries)`);
    }
    for (const b of backends) this.backends.set(b.id, { ...b });
  }

  async deleteBackends(ids: readonly number[]): Promise<void> {
    this.#enter('deleteBackends', [...ids]);
    for (const id of ids) {
      const user = [...this.services.values()].find((s) => s.backendIds.includes(id) || s.internalBackendIds?.includes(id) || s.memberIds?.includes(id));
      if (user) throw new DatapathError('refused', `fake: backend ${id} is still one of service ${user.id}'s`);
    }
    for (const id of ids) {
      this.backends.delete(id);
      this.deletedBackends.push(id);
    }
  }

  /** Runs `fn`; then a failNext('inBatch') fails the batch's finish, as a route the kernel refused would. */
  async inBatch<T>(fn: () => Promise<T>): Promise<T> {
    const result = await fn();
    this.#enter('inBatch', []);
    return result;
  }

  async upsertService(svc: LbServiceEntry): Promise<void> {
    this.#enter('upsertService', [svc.id]);
    for (const id of [...svc.backendIds, ...(svc.internalBackendIds ?? []), ...(svc.memberIds ?? [])]) {
      if (!this.backends.has(id)) throw new DatapathError('failed', `fake: service ${svc.id} names backend ${id}, which is not in the backend map`);
    }
    for (const m of svc.maglevTable ?? []) {
      if (!svc.backendIds.includes(m)) throw new DatapathError('failed', `fake: service ${svc.id}'s Maglev table names backend ${m}, not one of its slots`);
    }
    const frontend = `${svc.address}:${svc.port}/${svc.protocol}`;
    const clash = this.#frontends.get(frontend);
    if (clash !== undefined && clash !== svc.id) throw new DatapathError('failed', `fake: frontend ${frontend} is service ${clash}'s`);
    if (this.options.maxServices !== undefined && !this.services.has(svc.id) && this.services.size >= this.options.maxServices) {
      throw new DatapathError('failed', `fake: tendril_lb4_svc is full (${this.options.maxServices} services)`);
    }
    const old = this.services.get(svc.id);
    if (old) this.#frontends.delete(`${old.address}:${old.port}/${old.protocol}`);
    this.#frontends.set(frontend, svc.id);
    this.services.set(svc.id, {
      ...svc,
      backendIds: [...svc.backendIds],
      ...(svc.internalBackendIds ? { internalBackendIds: [...svc.internalBackendIds] } : {}),
      ...(svc.memberIds ? { memberIds: [...svc.memberIds] } : {}),
    });
  }

  async deleteService(id: number): Promise<void> {
    this.#enter('deleteService', [id]);
    const old = this.services.get(id);
    if (old) this.#frontends.delete(`${old.address}:${old.port}/${old.protocol}`);
    this.services.delete(id);
  }

  async restoreDone(liveServiceIds: readonly number[], liveBackendIds: readonly number[]): Promise<void> {
    this.#enter('restoreDone', []);
    const services = new Set(liveServiceIds);
    const backends = new Set(liveBackendIds);
    for (const [id, old] of [...this.services]) {
      if (services.has(id)) continue;
      this.#frontends.delete(`${old.address}:${old.port}/${old.protocol}`);
      this.services.delete(id);
    }
    for (const id of [...this.backends.keys()]) {
      if (backends.has(id)) continue;
      this.backends.delete(id);
      this.deletedBackends.push(id);
    }
    this.restored = { services: [...liveServiceIds], backends: [...liveBackendIds] };
  }

  #enter(op: FakeLoadBalancerOp, ids: number[]): void {
    this.calls.push({ op, ids });
    const next = this.#failures.get(op)?.[0];
    if (next === undefined) return;
    if (next.skip > 0) {
      next.skip--;
      return;
    }
    this.#failures.get(op)!.shift();
    throw next.err;
  }
}
