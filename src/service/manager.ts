/**
 * ServiceManager: the agent's services (Cilium's model: one frontend per
 * service ID), their backend IDs, and what the load-balancer maps hold for
 * them. Writes run one at a time. Each goes to the datapath first and is
 * persisted only once the datapath took it; a datapath (or disk) failure
 * puts back what was there and answers DATAPATH_FAILED, so a caller never
 * sees a service half-changed. Backends that no service refers to any more
 * leave the maps after the service that dropped them was rewritten. No
 * write looks for the connections of a backend that left a service: the
 * rendered entry lists the service's members, and the datapath moves a
 * connection pinned to a non-member on its next packet. A NodePort on ::
 * is one datapath frontend per node IPv6 address, each under an ID of its
 * own (frontends.ts); writes, deletes and rollbacks cover all of them.
 */
import { Serializer } from '../async/keyedSerializer.js';
import { UndoList } from '../async/undoList.js';
import type { LbBackendEntry, LoadBalancerDatapath } from '../datapath/types.js';
import type { Logger } from '../logging/logger.js';
import { BackendRegistry, type RefChange } from './backendRegistry.js';
import { isServiceError, ServiceError, ServiceErrorCode } from './errors.js';
import { type DatapathFrontend, datapathFrontends, entryOf, EXTRA_FRONTEND_ID_MAX, frontendKeysOf, ipv6NodePortAddresses, onEveryIpv6NodeAddress, sameFrontends } from './frontends.js';
import { MAGLEV_DEFAULT_TABLE_SIZE } from './maglev.js';
import { dependsOnLocality, keyOfBackend, renderService, type RenderContext } from './render.js';
import { SERVICE_RECORD_VERSION, type ServiceStore, type ServiceStoreChanges, type StoredService } from './serviceStore.js';
import type { LbAlgorithm, ServiceApi, ServiceChange, ServiceChangeResult, ServiceSpec, ServiceStatus } from './types.js';
import { frontendKey, type NormalizedService, sameService, validateServiceId, validateServiceSpec, type ValidationContext } from './validate.js';

export interface ServiceManagerOptions {
  /** The datapath's load balancer; without one every write is UNSUPPORTED. */
  loadBalancer: LoadBalancerDatapath | undefined;
  store: ServiceStore;
  log: Logger;
  /** `random` unless given. */
  algorithm?: LbAlgorithm;
  maglevTableSize?: number;
  /** This node's endpoint addresses: a backend there is local (external or internal traffic policy Local). */
  localAddresses?: () => Iterable<string>;
  /**
   * This node's own addresses: a NodePort frontend other than 0.0.0.0 and ::
   * must be one, a ClusterIP none; a NodePort on :: is served on each IPv6
   * one, as they are when the service is written (or restored).
   */
  nodeAddresses?: () => Iterable<string>;
  /** The node's router addresses and pod CIDRs: no ClusterIP, external or LoadBalancer frontend there (nor on an endpoint's address, localAddresses). */
  routerAddresses?: () => Iterable<string>;
  podCidrs?: () => Iterable<string>;
  /** What the cluster has at an address beyond this node (another node's pod, another node's pod CIDR), as a phrase; undefined: nothing. */
  addressOwner?: (ip: string) => string | undefined;
  /** How long after a failure services the datapath did not take are written again (default 10 s). */
  retryIntervalMs?: number;
}

interface ServiceState {
  spec: NormalizedService;
  /** What the datapath holds it as: one frontend under the service's ID, or for a NodePort on :: one per node IPv6 address. */
  frontends: DatapathFrontend[];
  /** Backend keys, in the spec's order. */
  keys: string[];
  /**
   * Whether the datapath took an entry rendered from `spec` and `local`
   * (so it can be rendered again to put it back; entries are not kept:
   * 10,000 Maglev tables would be 640 MB).
   */
  written: boolean;
  /** Whether the datapath holds the service as `spec` renders now. */
  realized: boolean;
  /** Backend keys that were local when the service was last rendered (persisted; used until endpoints are restored). */
  local: Set<string>;
}

export interface ServiceRestoreReport {
  restored: number;
  /** Services whose entries the datapath did not take at restore (realized false; retried on the next change). */
  failed: number[];
  /** Records that could not be used (unreadable, invalid, or a frontend another record has). */
  skipped: Array<{ id: number | string; error: string }>;
}

const ipOfKey = (key: string) => key.slice(0, key.lastIndexOf(':'));

/** Where a write's record goes: the store at once (a single call), or a batch's records (written together at its end). */
interface ServicePersistence {
  save(record: StoredService): Promise<void>;
  remove(id: number): Promise<void>;
}

/** A batch's records, the last change of each service winning. */
class BatchRecords implements ServicePersistence {
  readonly #changes = new Map<number, StoredService | undefined>();

  async save(record: StoredService): Promise<void> {
    this.#changes.set(record.id, record);
  }

  async remove(id: number): Promise<void> {
    this.#changes.set(id, undefined);
  }

  changes(): ServiceStoreChanges {
    const entries = [...this.#changes];
    return { save: entries.flatMap(([, r]) => (r ? [r] : [])), remove: entries.filter(([, r]) => r === undefined).map(([id]) => id) };
  }
}

function datapathFailed(what: string, err: unknown): ServiceError {
  return new ServiceError(ServiceErrorCode.DATAPATH_FAILED, `${what}: ${err instanceof Error ? err.message : String(err)}; nothing was changed`, { cause: err });
}

export class ServiceManager implements ServiceApi {
  readonly #services = new Map<number, ServiceState>();
  /** Frontend key → service ID (a NodePort on :: holds its own key and each node address's). */
  readonly #frontends = new Map<string, number>();
  /** The IDs of NodePorts' extra frontends (on ::, one per node IPv6 address beyond the first) → the service they serve. */
  readonly #extraIds = new Map<number, number>();
  /** Datapath frontend IDs whose deletion failed after a failed write: retried before the next write. */
  readonly #pendingServiceDeletes = new Set<number>();
  readonly #registry = new BackendRegistry();
  /** Backend IDs freed whose deletion from the datapath failed: retried before the next write (and by restoreDone at a start). */
  readonly #pendingBackendDeletes = new Set<number>();
  readonly #algorithm: LbAlgorithm;
  readonly #maglevTableSize: number;
  readonly #serial = new Serializer();
  /** False until the endpoints are restored: locality comes from the records until then. */
  #liveLocality = false;
  /** While a batch runs: the node's endpoint addresses, read once for all of its changes (endpoints change only between writes). */
  #batchLocal: ReadonlySet<string> | undefined;
  #localityQueued = false;
  #retryTimer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(private readonly o: ServiceManagerOptions) {
    this.#algorithm = o.algorithm ?? 'random';
    this.#maglevTableSize = o.maglevTableSize ?? MAGLEV_DEFAULT_TABLE_SIZE;
  }

  get supported(): boolean {
    return this.o.loadBalancer !== undefined;
  }

  get size(): number {
    return this.#services.size;
  }

  // ---- ServiceApi --------------------------------------------------------------

  get(id: number): ServiceStatus | undefined {
    const s = this.#services.get(id);
    return s && this.#status(s, this.#localSet());
  }

  list(): ServiceStatus[] {
    const local = this.#localSet();
    return [...this.#services.values()].sort((a, b) => a.spec.id - b.spec.id).map((s) => this.#status(s, local));
  }

  async upsert(id: number, body: ServiceSpec): Promise<{ service: ServiceStatus; created: boolean; changed: boolean }> {
    const lb = this.#requireLb();
    const spec = validateServiceSpec(id, body, this.#validationContext());
    return this.#serial.run(async () => {
      await this.#retryDeletes(lb);
      const r = await this.#upsertNow(lb, spec, this.o.store);
      if (r.changed) this.o.log.info({ service: spec.id, frontend: frontendKey(spec.frontend), backends: spec.backends.length }, r.created ? 'service created' : 'service updated');
      return { service: this.#status(r.state, this.#localSet()), created: r.created, changed: r.changed };
    });
  }

  async delete(id: number): Promise<void> {
    const lb = this.#requireLb();
    validateServiceId(id);
    return this.#serial.run(async () => {
      await this.#retryDeletes(lb);
      const prev = await this.#deleteNow(lb, id, this.o.store);
      this.o.log.info({ service: id, frontend: frontendKey(prev.spec.frontend) }, 'service deleted');
    });
  }

  /**
   * A batch: each change as upsert or delete would make it, in order, with the
   * node's addresses read once and every record written in one transaction at
   * the end. When that transaction fails, the batch's changes are undone in
   * the datapath too (in reverse) and the batch fails whole: the maps never
   * serve what a restart would not bring back.
   */
  async apply(changes: readonly ServiceChange[]): Promise<ServiceChangeResult[]> {
    const lb = this.#requireLb();
    const ctx = this.#validationContext();
    const checked = changes.map((c): { op: 'upsert' | 'delete'; id: number; spec?: NormalizedService; error?: ServiceError } => {
      const op = 'delete' in c ? 'delete' : 'upsert';
      const id = 'delete' in c ? c.delete : c.upsert.id;
      try {
        if ('delete' in c) {
          validateServiceId(id);
          return { op, id };
        }
        return { op, id, spec: validateServiceSpec(id, c.upsert, ctx) };
      } catch (err) {
        if (!isServiceError(err)) throw err;
        return { op, id, error: err };
      }
    });
    return this.#serial.run(async () => {
      await this.#retryDeletes(lb);
      const pending = new BatchRecords();
      /** Each change made, with the service as it was before it (for the undo of a failed commit). */
      const made: Array<{ id: number; before: ServiceState | undefined }> = [];
      const results: ServiceChangeResult[] = [];
      const applyAll = async () => {
        for (const c of checked) {
          const failed = (err: ServiceError): ServiceChangeResult => ({ id: c.id, op: c.op, result: 'failed', error: { code: err.code, message: err.message } });
          if (c.error) {
            results.push(failed(c.error));
            continue;
          }
          const before = this.#services.get(c.id);
          try {
            if (c.op === 'delete') {
              if (!before) {
                results.push({ id: c.id, op: c.op, result: 'not-found' });
                continue;
              }
              await this.#deleteNow(lb, c.id, pending);
              results.push({ id: c.id, op: c.op, result: 'deleted' });
            } else {
              const r = await this.#upsertNow(lb, c.spec!, pending);
              results.push({ id: c.id, op: c.op, result: r.created ? 'created' : r.changed ? 'updated' : 'unchanged' });
              if (!r.changed) continue;
            }
            made.push({ id: c.id, before });
          } catch (err) {
            if (!isServiceError(err)) throw err;
            results.push(failed(err));
          }
        }
      };
      let stage = 'the datapath did not finish it (the frontends\' routes)';
      this.#batchLocal = this.#liveLocality ? new Set(this.o.localAddresses ? this.o.localAddresses() : []) : undefined;
      try {
        await lb.inBatch(applyAll).finally(() => (this.#batchLocal = undefined));
        stage = 'their records could not be written';
        await this.o.store.commit(pending.changes());
      } catch (err) {
        await this.#undoBatch(lb, made);
        throw datapathFailed(`a batch of ${changes.length} service changes: ${stage}`, err);
      }
      const count = (what: ServiceChangeResult['result']) => results.filter((r) => r.result === what).length;
      this.o.log.info({ changes: changes.length, created: count('created'), updated: count('updated'), deleted: count('deleted'), failed: count('failed') }, 'service batch applied');
      return results;
    });
  }

  // ---- lifecycle ---------------------------------------------------------------

  /**
   * Takes the persisted services back and writes them to the datapath (at
   * agent start, before endpoints regenerate), then lets the datapath drop
   * entries of services and backends that are gone. Backend IDs are the
   * persisted ones, so connections pinned to them survive the restart.
   */
  restore(): Promise<ServiceRestoreReport> {
    return this.#serial.run(async () => {
      const report: ServiceRestoreReport = { restored: 0, failed: [], skipped: [] };
      const loaded = await this.o.store.loadAll();
      for (const p of loaded.problems) {
        this.o.log.error({ file: p.file, error: p.error }, 'service record unreadable; moved aside');
        report.skipped.push({ id: p.file, error: p.error });
      }
      const lb = this.o.loadBalancer;
      if (!lb) {
        if (loaded.records.length > 0) this.o.log.warn({ services: loaded.records.length }, 'services are kept on disk but not served: this datapath does not load-balance');
        return report;
      }
      const accepted: Array<{ rec: StoredService; spec: NormalizedService }> = [];
      for (const rec of loaded.records) {
        try {
          const spec = validateServiceSpec(rec.id, rec.spec);
          const fk = frontendKey(spec.frontend);
          const owner = this.#frontends.get(fk);
          if (owner !== undefined) throw new Error(`frontend ${fk} already belongs to restored service ${owner}`);
          this.#frontends.set(fk, spec.id);
          accepted.push({ rec, spec });
        } catch (err) {
          this.o.log.error({ service: rec.id, err }, 'service record not restored');
          report.skipped.push({ id: rec.id, error: (err as Error).message });
        }
      }
      const expanded = this.#restoreFrontends(accepted, report);
      // Every persisted ID is claimed before any is allocated, so no restored service takes another's.
      for (const { rec } of expanded) for (const [key, id] of Object.entries(rec.backendIds)) this.#registry.claim(key, id);
      const renumbered: number[] = [];
      for (const { rec, spec, frontends } of expanded) {
        const keys = spec.backends.map((b) => keyOfBackend(spec, b));
        this.#registry.replaceRefs(spec.id, [], new Map(spec.backends.map((b, i) => [keys[i]!, b.state] as const)));
        const moved = onEveryIpv6NodeAddress(spec) && !sameFrontends(rec.frontends ?? [], frontends);
        if (moved || keys.some((k) => rec.backendIds[k] !== this.#registry.idOf(k))) renumbered.push(spec.id);
        const s: ServiceState = { spec, frontends, keys, written: false, realized: false, local: new Set(rec.local) };
        this.#services.set(spec.id, s);
        this.#hold(s);
      }
      this.#registry.dropUnreferenced();
      try {
        await lb.upsertBackends(this.#registry.ids().map((id) => this.#backendEntry(this.#registry.keyOf(id)!)));
      } catch (err) {
        this.o.log.error({ err }, 'restoring service backends failed; services stay unrealized until changed');
      }
      for (const s of this.#services.values()) {
        const entry = renderService(s.spec, this.#renderContext(s, undefined));
        try {
          for (const f of s.frontends) await lb.upsertService(entryOf(entry, f));
          s.written = true;
          s.realized = true;
          report.restored++;
        } catch (err) {
          this.o.log.error({ service: s.spec.id, err }, 'restoring service failed; it is retried');
          report.failed.push(s.spec.id);
          this.#scheduleRetry();
        }
      }
      for (const id of renumbered) {
        const s = this.#services.get(id)!;
        await this.o.store.save(this.#record(s)).catch((err: unknown) => this.o.log.error({ service: id, err }, 'persisting renumbered backends or frontends failed'));
      }
      try {
        await lb.restoreDone([...this.#services.values()].flatMap((s) => s.frontends.map((f) => f.id)), this.#registry.ids());
      } catch (err) {
        // Entries of services deleted while the agent was down stay until the next start; not worth refusing to start over.
        this.o.log.error({ err }, 'dropping the load-balancer entries of services gone while the agent was down failed');
      }
      this.o.log.info({ services: report.restored, failed: report.failed.length, skipped: report.skipped.length, backends: this.#registry.size }, 'services restored');
      return report;
    });
  }

  /**
   * From now on locality comes from the node's endpoints (call once they
   * are restored): services whose entries depend on it are rendered again.
   */
  endpointsRestored(): Promise<void> {
    this.#liveLocality = true;
    return this.localityChanged();
  }

  /**
   * An endpoint came or went: services with an external or internal traffic
   * policy Local (and any not realized) are rendered again. Calls in a burst coalesce into one pass.
   */
  localityChanged(): Promise<void> {
    if (!this.#liveLocality || !this.o.loadBalancer) return Promise.resolve();
    if (this.#localityQueued) return this.#serial.settled();
    this.#localityQueued = true;
    return this.#serial.run(async () => {
      this.#localityQueued = false;
      await this.#refresh(this.o.loadBalancer!);
    });
  }

  /**
   * The node's addresses changed (a router address taken while running):
   * NodePorts on :: are served on the addresses as they are now (and any
   * service not realized is written again).
   */
  nodeAddressesChanged(): Promise<void> {
    if (!this.o.loadBalancer) return Promise.resolve();
    return this.#serial.run(() => this.#refresh(this.o.loadBalancer!));
  }

  /** Waits for writes queued so far. */
  async idle(): Promise<void> {
    await this.#serial.settled();
  }

  /** No more retries; waits for writes queued so far, then closes the store. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    await this.idle();
    this.o.store.close();
  }

  /** A service is not realized: it is written again after a while (and by any change before that). */
  #scheduleRetry(): void {
    if (this.#stopped || this.#retryTimer !== undefined || !this.o.loadBalancer) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      void this.#serial.run(() => this.#refresh(this.o.loadBalancer!)).catch((err: unknown) => this.o.log.error({ err }, 'retrying unrealized services failed'));
    }, this.o.retryIntervalMs ?? 10_000);
    this.#retryTimer.unref();
  }

  // ---- internals ---------------------------------------------------------------

  /**
   * The datapath frontends of `spec` on the node's addresses as they are now
   * (one, unless it is a NodePort on ::). `kept`: address → ID the service
   * had; an ID is kept only where it is still the service's.
   */
  #frontendsOf(spec: NormalizedService, kept: ReadonlyMap<string, number>, reserved: ReadonlySet<number> = new Set()): DatapathFrontend[] {
    const addresses = onEveryIpv6NodeAddress(spec) ? ipv6NodePortAddresses(this.o.nodeAddresses?.() ?? []) : [];
    const own = new Map([...kept].filter(([, id]) => id === spec.id || this.#extraIds.get(id) === spec.id));
    return datapathFrontends(spec, addresses, own, (chosen) => {
      for (let id = EXTRA_FRONTEND_ID_MAX; id >= 1; id--) {
        if (chosen.has(id) || reserved.has(id) || this.#services.has(id) || this.#extraIds.has(id) || this.#pendingServiceDeletes.has(id)) continue;
        return id;
      }
      return undefined;
    });
  }

  /**
   * At restore: each record's datapath frontends. A NodePort on :: keeps the
   * IDs its record names for the node addresses it still has (claimed before
   * any is allocated, a service's own ID before another's extra one); a record
   * whose frontends another has is skipped.
   */
  #restoreFrontends(accepted: ReadonlyArray<{ rec: StoredService; spec: NormalizedService }>, report: ServiceRestoreReport): Array<{ rec: StoredService; spec: NormalizedService; frontends: DatapathFrontend[] }> {
    const ownIds = new Set(accepted.map((a) => a.spec.id));
    const kept = new Map<number, Map<string, number>>();
    for (const { rec, spec } of accepted) {
      const mine = new Map<string, number>();
      if (onEveryIpv6NodeAddress(spec)) {
        for (const f of rec.frontends ?? []) {
          if (f.id !== spec.id && (ownIds.has(f.id) || this.#extraIds.has(f.id))) continue;
          if (f.id !== spec.id) this.#extraIds.set(f.id, spec.id);
          mine.set(f.ip, f.id);
        }
      }
      kept.set(spec.id, mine);
    }
    const out: Array<{ rec: StoredService; spec: NormalizedService; frontends: DatapathFrontend[] }> = [];
    for (const { rec, spec } of accepted) {
      const mine = kept.get(spec.id)!;
      try {
        const frontends = this.#frontendsOf(spec, mine, ownIds);
        for (const id of mine.values()) if (this.#extraIds.get(id) === spec.id) this.#extraIds.delete(id);
        const own = frontendKey(spec.frontend);
        for (const fk of frontendKeysOf(spec, frontends)) {
          const owner = this.#frontends.get(fk);
          if (fk !== own && owner !== undefined) throw new Error(`frontend ${fk} already belongs to restored service ${owner}`);
        }
        for (const f of frontends) if (f.id !== spec.id) this.#extraIds.set(f.id, spec.id);
        for (const fk of frontendKeysOf(spec, frontends)) this.#frontends.set(fk, spec.id);
        if (onEveryIpv6NodeAddress(spec) && frontends.length === 0) this.o.log.warn({ service: spec.id }, 'a NodePort on :: is not served: the node has no IPv6 address');
        out.push({ rec, spec, frontends });
      } catch (err) {
        for (const id of mine.values()) if (this.#extraIds.get(id) === spec.id) this.#extraIds.delete(id);
        this.#frontends.delete(frontendKey(spec.frontend));
        this.o.log.error({ service: rec.id, err }, 'service record not restored');
        report.skipped.push({ id: rec.id, error: (err as Error).message });
      }
    }
    return out;
  }

  /** Upsert's work inside the queue: conflicts, then the datapath, then `persist`. */
  async #upsertNow(lb: LoadBalancerDatapath, spec: NormalizedService, persist: ServicePersistence): Promise<{ state: ServiceState; created: boolean; changed: boolean }> {
    const holder = this.#extraIds.get(spec.id);
    if (holder !== undefined) {
      const on = this.#services.get(holder)?.frontends.find((f) => f.id === spec.id)?.ip;
      throw new ServiceError(ServiceErrorCode.CONFLICT, `id: service ID ${spec.id} is service ${holder}'s frontend on ${on ?? 'a node address'} (a NodePort on :: is one frontend per node IPv6 address, each under an ID of its own); use another ID`);
    }
    const prev = this.#services.get(spec.id);
    const frontends = this.#frontendsOf(spec, new Map(prev?.frontends.map((f) => [f.ip, f.id])));
    if (onEveryIpv6NodeAddress(spec) && frontends.length === 0) {
      throw new ServiceError(ServiceErrorCode.INVALID, 'frontend-address.ip: a NodePort on :: is served on each of this node\'s IPv6 addresses, and it has none');
    }
    // Served as it is on the node's addresses as they are now: the same spec again picks up addresses that came or went.
    if (prev && prev.realized && sameService(prev.spec, spec) && sameFrontends(prev.frontends, frontends)) return { state: prev, created: false, changed: false };
    for (const fk of frontendKeysOf(spec, frontends)) {
      const owner = this.#frontends.get(fk);
      if (owner === undefined || owner === spec.id) continue;
      const ownerSpec = this.#services.get(owner)?.spec;
      const why = onEveryIpv6NodeAddress(spec) && fk !== frontendKey(spec.frontend) ? ' (:: stands for each node IPv6 address)' : ownerSpec && onEveryIpv6NodeAddress(ownerSpec) ? ` (service ${owner} is a NodePort on ::, served on each node IPv6 address)` : '';
      throw new ServiceError(ServiceErrorCode.CONFLICT, `frontend-address: ${fk} already belongs to service ${owner}${why}`);
    }
    const next = await this.#write(lb, spec, frontends, prev, persist);
    return { state: next, created: prev === undefined, changed: true };
  }

  /** Delete's work inside the queue: the datapath, then `persist`; the service as it was. */
  async #deleteNow(lb: LoadBalancerDatapath, id: number, persist: ServicePersistence): Promise<ServiceState> {
    const prev = this.#services.get(id);
    if (!prev) throw new ServiceError(ServiceErrorCode.NOT_FOUND, `service ${id} not found`);
    const undo = new UndoList();
    let change: RefChange | undefined;
    let stage = 'the datapath did not delete it';
    try {
      for (const f of prev.frontends) {
        // A frontend half-deleted or deleted is written back as it was (its backends are still there).
        undo.add(() => this.#putBackFrontend(lb, prev, f, f.id), `frontend ${f.ip} (${f.id})`);
        await lb.deleteService(f.id);
      }
      change = this.#registry.replaceRefs(id, prev.keys, new Map());
      stage = 'its record could not be removed';
      await persist.remove(id);
    } catch (err) {
      change?.undo();
      await this.#rollBack(lb, id, undo, prev, []);
      throw datapathFailed(`service ${id}: ${stage}`, err);
    }
    this.#services.delete(id);
    this.#release(prev);
    await this.#settleBackends(lb, prev.keys.filter((k) => this.#registry.idOf(k) !== undefined), change.freed);
    return prev;
  }

  /**
   * A batch whose records could not be written: each change it made is
   * undone in reverse (a service written as it was, or removed), nothing
   * persisted. A service that cannot be put back is marked unrealized and
   * written again later.
   */
  async #undoBatch(lb: LoadBalancerDatapath, made: ReadonlyArray<{ id: number; before: ServiceState | undefined }>): Promise<void> {
    const nowhere: ServicePersistence = { save: async () => {}, remove: async () => {} };
    for (const { id, before } of [...made].reverse()) {
      try {
        if (before) await this.#write(lb, before.spec, before.frontends, this.#services.get(id), nowhere);
        else if (this.#services.has(id)) await this.#deleteNow(lb, id, nowhere);
      } catch (err) {
        this.o.log.error({ service: id, err }, 'undoing a change of a batch whose records could not be written failed');
        const s = this.#services.get(id);
        if (s) s.realized = false;
        this.#scheduleRetry();
      }
    }
  }

  /** The service's frontend keys and extra IDs become its own. */
  #hold(s: ServiceState): void {
    for (const fk of frontendKeysOf(s.spec, s.frontends)) this.#frontends.set(fk, s.spec.id);
    for (const f of s.frontends) if (f.id !== s.spec.id) this.#extraIds.set(f.id, s.spec.id);
  }

  /** The service's frontend keys and extra IDs are free again. */
  #release(s: ServiceState): void {
    for (const fk of frontendKeysOf(s.spec, s.frontends)) if (this.#frontends.get(fk) === s.spec.id) this.#frontends.delete(fk);
    for (const f of s.frontends) if (this.#extraIds.get(f.id) === s.spec.id) this.#extraIds.delete(f.id);
  }

  #requireLb(): LoadBalancerDatapath {
    const lb = this.o.loadBalancer;
    if (!lb) throw new ServiceError(ServiceErrorCode.UNSUPPORTED, 'services need the eBPF datapath (--datapath bpf); this agent runs the routing datapath');
    return lb;
  }

  /** What the node uses now: the addresses a new frontend may not take. */
  #validationContext(): ValidationContext {
    const { nodeAddresses, routerAddresses, localAddresses, podCidrs, addressOwner } = this.o;
    return {
      // Both families: an IPv6 NodePort names one of the node's IPv6 addresses, and an IPv6 ClusterIP may not be one.
      ...(nodeAddresses ? { nodeAddresses: new Set(nodeAddresses()) } : {}),
      ...(routerAddresses ? { routerAddresses: new Set(routerAddresses()) } : {}),
      ...(localAddresses ? { podAddresses: new Set(localAddresses()) } : {}),
      ...(podCidrs ? { podCidrs: [...podCidrs()] } : {}),
      ...(addressOwner ? { addressOwner } : {}),
    };
  }

  #localSet(): ReadonlySet<string> | undefined {
    if (!this.#liveLocality) return undefined;
    return this.#batchLocal ?? new Set(this.o.localAddresses ? this.o.localAddresses() : []);
  }

  /** `local` undefined: before endpoints are restored, the service's persisted locality. */
  #renderContext(s: Pick<ServiceState, 'local'>, local: ReadonlySet<string> | undefined): RenderContext {
    return {
      algorithm: this.#algorithm,
      maglevTableSize: this.#maglevTableSize,
      idOf: (key) => {
        const id = this.#registry.idOf(key);
        if (id === undefined) throw new Error(`backend ${key} has no ID`);
        return id;
      },
      isLocal: (key) => (local ? local.has(ipOfKey(key)) : s.local.has(key)),
    };
  }

  #isLocal(s: ServiceState, key: string, local: ReadonlySet<string> | undefined): boolean {
    return local ? local.has(ipOfKey(key)) : s.local.has(key);
  }

  #backendEntry(key: string): LbBackendEntry {
    const i = key.lastIndexOf('/');
    const addr = key.slice(0, i);
    const j = addr.lastIndexOf(':');
    return {
      id: this.#registry.idOf(key)!,
      address: addr.slice(0, j),
      port: Number(addr.slice(j + 1)),
      protocol: key.slice(i + 1) as LbBackendEntry['protocol'],
      state: this.#registry.stateOf(key) ?? 'active',
    };
  }

  #record(s: ServiceState): StoredService {
    const backendIds: Record<string, number> = {};
    for (const k of s.keys) backendIds[k] = this.#registry.idOf(k)!;
    return {
      version: SERVICE_RECORD_VERSION,
      id: s.spec.id,
      spec: this.#specBody(s.spec),
      backendIds,
      local: [...s.local].sort(),
      // The IDs of a NodePort on ::'s frontends: kept across restarts, as conntrack names them.
      ...(onEveryIpv6NodeAddress(s.spec) ? { frontends: s.frontends.map((f) => ({ ...f })) } : {}),
    };
  }

  #specBody(spec: NormalizedService): ServiceSpec {
    return { id: spec.id, 'frontend-address': { ...spec.frontend }, 'backend-addresses': spec.backends.map((b) => ({ ...b })), flags: { ...spec.flags } };
  }

  #status(s: ServiceState, local: ReadonlySet<string> | undefined): ServiceStatus {
    return {
      id: s.spec.id,
      'frontend-address': { ...s.spec.frontend },
      'backend-addresses': s.spec.backends.map((b, i) => ({ ...b, id: this.#registry.idOf(s.keys[i]!) ?? 0, local: this.#isLocal(s, s.keys[i]!, local) })),
      flags: { ...s.spec.flags },
      realized: s.realized,
    };
  }

  /** Upsert's datapath and disk work for a spec that differs from what the service had (or was not realized). */
  async #write(lb: LoadBalancerDatapath, spec: NormalizedService, frontends: DatapathFrontend[], prev: ServiceState | undefined, persist: ServicePersistence): Promise<ServiceState> {
    const id = spec.id;
    const keys = spec.backends.map((b) => keyOfBackend(spec, b));
    let change: RefChange;
    try {
      change = this.#registry.replaceRefs(id, prev?.keys ?? [], new Map(spec.backends.map((b, i) => [keys[i]!, b.state] as const)));
    } catch (err) {
      throw datapathFailed(`service ${id}: no backend ID for it`, err);
    }
    const localNow = this.#localSet();
    const next: ServiceState = { spec, frontends, keys, written: false, realized: false, local: new Set() };
    const wasLocal = (k: string) => (localNow ? localNow.has(ipOfKey(k)) : prev?.local.has(k) === true);
    for (const k of keys) if (wasLocal(k)) next.local.add(k);
    const entry = renderService(spec, this.#renderContext(next, localNow));
    // Backends the service had that others still use may change state (the most serving reference wins).
    const stillUsed = (prev?.keys ?? []).filter((k) => !keys.includes(k) && this.#registry.idOf(k) !== undefined);
    // Each step's inverse, so a failure half way (the third of four frontends) puts back all of it.
    const undo = new UndoList();
    let stage = 'the datapath did not take it';
    try {
      undo.add(async () => {
        if (prev?.written) await lb.upsertBackends(prev.keys.map((k) => this.#backendEntry(k)));
      }, 'backends as they were');
      await lb.upsertBackends([...keys, ...stillUsed].map((k) => this.#backendEntry(k)));
      // Frontends the service no longer has go first: a node address changing hands between IDs is never held twice.
      for (const f of prev?.frontends ?? []) {
        if (frontends.some((n) => n.id === f.id)) continue;
        undo.add(() => this.#putBackFrontend(lb, prev, f, f.id), `frontend ${f.ip} (${f.id})`);
        await lb.deleteService(f.id);
      }
      for (const f of frontends) {
        undo.add(() => this.#putBackFrontend(lb, prev, prev?.frontends.find((p) => p.id === f.id), f.id), `frontend ${f.ip} (${f.id})`);
        await lb.upsertService(entryOf(entry, f));
      }
      next.written = true;
      next.realized = true;
      stage = 'its record could not be written';
      await persist.save(this.#record(next));
    } catch (err) {
      change.undo();
      await this.#rollBack(lb, id, undo, prev, change.allocated);
      throw datapathFailed(`service ${id}: ${stage}`, err);
    }
    if (prev) this.#release(prev);
    this.#services.set(id, next);
    this.#hold(next);
    await this.#settleBackends(lb, [], change.freed);
    this.o.log.debug({ service: id, frontend: frontendKey(spec.frontend), frontends: frontends.length, backends: entry.backendIds.length }, prev ? 'service updated' : 'service created');
    return next;
  }

  /**
   * An undo step: datapath frontend `id` gets back what `prev` wrote there
   * (`was`, its frontend on that ID), or goes when it was not the service's.
   * A service that was never realized keeps whatever the maps held for it
   * (a previous run's entries).
   */
  async #putBackFrontend(lb: LoadBalancerDatapath, prev: ServiceState | undefined, was: DatapathFrontend | undefined, id: number): Promise<void> {
    if (prev && was) {
      if (prev.written) await lb.upsertService(entryOf(renderService(prev.spec, this.#renderContext(prev, undefined)), was));
      return;
    }
    try {
      await lb.deleteService(id);
    } catch (err) {
      this.#pendingServiceDeletes.add(id);
      throw err;
    }
  }

  /**
   * After a failed write or delete (the registry already undone): the undo
   * steps put the datapath back as the service was (or remove the new one),
   * then the backends allocated for the write go again. When any of that
   * fails, the service is marked unrealized, so it is written whole again.
   */
  async #rollBack(lb: LoadBalancerDatapath, id: number, undo: UndoList, prev: ServiceState | undefined, allocated: readonly number[]): Promise<void> {
    const failures = await undo.runAll();
    for (const f of failures) this.o.log.error({ service: id, step: f.label, err: f.error }, 'putting the service back after a failed change failed');
    let failed = failures.length > 0;
    if (allocated.length > 0) {
      try {
        await lb.deleteBackends(allocated);
      } catch (err) {
        failed = true;
        for (const b of allocated) this.#pendingBackendDeletes.add(b);
        this.o.log.error({ service: id, err }, 'deleting the backends allocated for a failed write failed; retried with the next change');
      }
    }
    if (failed && prev) {
      prev.realized = false;
      this.#scheduleRetry();
      this.o.log.error({ service: id }, 'the service is marked unrealized and written again');
    }
  }

  /** Shared backends whose state may have changed are rewritten; freed ones leave the backend map. */
  async #settleBackends(lb: LoadBalancerDatapath, changedKeys: readonly string[], freed: readonly number[]): Promise<void> {
    try {
      if (changedKeys.length > 0) await lb.upsertBackends(changedKeys.map((k) => this.#backendEntry(k)));
    } catch (err) {
      this.o.log.warn({ err }, 'updating shared backends\' state failed');
    }
    if (freed.length === 0) return;
    try {
      await lb.deleteBackends(freed);
    } catch (err) {
      for (const b of freed) this.#pendingBackendDeletes.add(b);
      this.o.log.warn({ backends: freed, err }, 'deleting unused backends failed; retried with the next change');
    }
  }

  /** Frontends, then backends, whose deletion failed earlier and that nothing took since. */
  async #retryDeletes(lb: LoadBalancerDatapath): Promise<void> {
    for (const id of [...this.#pendingServiceDeletes]) {
      // Taken again since (the service written whole, or another's frontend): not ours to delete.
      if (!this.#services.has(id) && !this.#extraIds.has(id)) {
        try {
          await lb.deleteService(id);
        } catch (err) {
          this.o.log.warn({ service: id, err }, 'deleting a frontend left by a failed write failed again');
          continue;
        }
      }
      this.#pendingServiceDeletes.delete(id);
    }
    if (this.#pendingBackendDeletes.size === 0) return;
    // An ID handed out again since is in use: not ours to delete.
    const ids = [...this.#pendingBackendDeletes].filter((id) => this.#registry.keyOf(id) === undefined);
    try {
      if (ids.length > 0) await lb.deleteBackends(ids);
      this.#pendingBackendDeletes.clear();
    } catch (err) {
      this.o.log.warn({ backends: ids, err }, 'deleting unused backends failed again');
    }
  }

  /**
   * Renders again the services that depend on locality (and any not
   * realized), writing what changed; a NodePort on :: whose node addresses
   * changed is written whole on the new ones.
   */
  async #refresh(lb: LoadBalancerDatapath): Promise<void> {
    await this.#retryDeletes(lb);
    const local = this.#localSet();
    for (const s of this.#services.values()) {
      if (onEveryIpv6NodeAddress(s.spec) && (await this.#followNodeAddresses(lb, s))) continue;
      if (!dependsOnLocality(s.spec) && s.realized) continue;
      const nowLocal = new Set(s.keys.filter((k) => this.#isLocal(s, k, local)));
      const localChanged = nowLocal.size !== s.local.size || [...nowLocal].some((k) => !s.local.has(k));
      // The entry is a function of the spec, the IDs and locality: unchanged locality, unchanged entry.
      if (s.realized && !localChanged) continue;
      const entry = renderService(s.spec, this.#renderContext(s, local));
      try {
        if (!s.realized) await lb.upsertBackends(s.keys.map((k) => this.#backendEntry(k)));
        for (const f of s.frontends) await lb.upsertService(entryOf(entry, f));
        s.written = true;
        s.realized = true;
      } catch (err) {
        s.realized = false;
        this.o.log.error({ service: s.spec.id, err }, 'rewriting service failed; it is marked unrealized and retried');
        this.#scheduleRetry();
        continue;
      }
      s.local = nowLocal;
      await this.o.store.save(this.#record(s)).catch((err: unknown) => this.o.log.warn({ service: s.spec.id, err }, 'persisting service locality failed'));
    }
  }

  /**
   * A NodePort on :: on the node's addresses as they are now: true when it
   * was written again (or tried: a failure is retried). An address another
   * service's frontend holds on the same port keeps the service as it is.
   */
  async #followNodeAddresses(lb: LoadBalancerDatapath, s: ServiceState): Promise<boolean> {
    const id = s.spec.id;
    let frontends: DatapathFrontend[];
    try {
      frontends = this.#frontendsOf(s.spec, new Map(s.frontends.map((f) => [f.ip, f.id])));
    } catch (err) {
      this.o.log.warn({ service: id, err }, 'a NodePort on :: is not extended to the node\'s new addresses');
      return false;
    }
    if (sameFrontends(frontends, s.frontends)) return false;
    const taken = frontendKeysOf(s.spec, frontends).find((fk) => (this.#frontends.get(fk) ?? id) !== id);
    if (taken !== undefined) {
      this.o.log.warn({ service: id, frontend: taken, holder: this.#frontends.get(taken) }, 'a NodePort on :: is not extended to the node\'s new addresses: another service has one of them on its port');
      return false;
    }
    try {
      await this.#write(lb, s.spec, frontends, s, this.o.store);
      this.o.log.info({ service: id, frontends: frontends.map((f) => f.ip) }, 'a NodePort on :: follows the node\'s IPv6 addresses');
    } catch (err) {
      this.o.log.error({ service: id, err }, 'moving a NodePort on :: to the node\'s addresses failed; retried');
      this.#scheduleRetry();
    }
    return true;
  }
}
