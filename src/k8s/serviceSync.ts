/**
 * Kubernetes Services and EndpointSlices → the agent's services. Each
 * frontend of a Service is one tendril service whose ID comes from a range
 * only Kubernetes uses, so `initialSyncDone` can tell what Kubernetes left
 * behind (a Service deleted while the agent was down) from what a user made
 * through the API. A frontend keeps its ID for as long as some Service has
 * it — across agent restarts too, since restored services are found by
 * frontend — because the datapath's conntrack entries name the service by
 * its ID: a new ID would cut every open connection.
 */
import { Serializer } from '../async/keyedSerializer.js';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { MAX_SERVICE_ID } from '../datapath/limits.js';
import type { Logger } from '../logging/logger.js';
import { isServiceError, ServiceError, ServiceErrorCode, type ServiceApi, type ServiceChangeResult, type ServiceSpec } from '../service/index.js';
import { HealthCheckNodePorts } from './healthCheckNodePorts.js';
import { k8sServiceFrontends, specFrontendKey } from './k8sServices.js';

/** Service IDs of Kubernetes' frontends: the upper half of the datapath's range (the lower half is left to the API's users). */
export const K8S_SERVICE_ID_MIN = Math.floor(MAX_SERVICE_ID / 2) + 1;
export const K8S_SERVICE_ID_MAX = MAX_SERVICE_ID;

export const isK8sServiceId = (id: number): boolean => id >= K8S_SERVICE_ID_MIN && id <= K8S_SERVICE_ID_MAX;

/**
 * The services API as users get it while Kubernetes is on: IDs of the
 * Kubernetes range are refused for writes. A user's service there would be
 * taken for one Kubernetes left behind and deleted at the next start, and a
 * user's write to one of Kubernetes' would be undone by its next event.
 */
export function userServiceApi(services: ServiceApi): ServiceApi {
  const refused = (id: number) =>
    new ServiceError(
      ServiceErrorCode.CONFLICT,
      `service ID ${id} is in ${K8S_SERVICE_ID_MIN}–${K8S_SERVICE_ID_MAX}, the IDs of Kubernetes Services' frontends while the agent follows Kubernetes: use ${K8S_SERVICE_ID_MIN - 1} or below (change the Service in Kubernetes to change its frontends)`,
    );
  return {
    upsert: (id, spec) => (isK8sServiceId(id) ? Promise.reject(refused(id)) : services.upsert(id, spec)),
    delete: (id) => (isK8sServiceId(id) ? Promise.reject(refused(id)) : services.delete(id)),
    // Every change is checked first: one in the range refuses the batch, which then changes nothing.
    apply: (changes) => {
      const id = changes.map((c) => ('delete' in c ? c.delete : c.upsert.id)).find(isK8sServiceId);
      return id !== undefined ? Promise.reject(refused(id)) : services.apply(changes);
    },
    get: (id) => services.get(id),
    list: () => services.list(),
  };
}

/** Whether `claim` takes a frontend from the Service holding it: a ClusterIP over an external or LoadBalancer IP. */
function outranks(claim: ServiceSpec, holder: ServiceSpec | undefined): boolean {
  return claim.flags.type === 'ClusterIP' && holder !== undefined && holder.flags.type !== 'ClusterIP';
}

/** Default wait before writing again a frontend the datapath did not take. */
const DEFAULT_RETRY_MS = 10_000;

export interface ServiceSyncOptions {
  services: ServiceApi;
  nodeName: string;
  logger: Logger;
  /** How long after a datapath failure a frontend is written again (default 10 s). */
  retryIntervalMs?: number;
  /** The node's IPv6 InternalIPs, read at each update: an IPv6 NodePort is served on each (none: not served). */
  ipv6NodePortAddresses?: () => readonly string[];
  /** Serve the healthCheckNodePort of LoadBalancer Services with externalTrafficPolicy Local (host: where; default every address). */
  healthCheckNodePorts?: { host?: string };
}

/** A frontend a Service holds: its ID stays while the Service has the frontend. */
interface Held {
  key: string;
  id: number;
}

interface QueuedUpdate {
  svc: V1Service | undefined;
  slices: readonly V1EndpointSlice[];
  done: Promise<void>;
}

/** A change a drain makes, with what its outcome is filed under. */
type BatchedChange = { op: 'upsert'; key: string; fk: string; id: number; spec: ServiceSpec } | { op: 'delete'; key: string | undefined; fk: string; id: number };

const frontendOfStatus = (f: { ip: string; port: number; protocol: string }) => `${f.ip}:${f.port}/${f.protocol}`;

export class ServiceSync {
  readonly #services: ServiceApi;
  readonly #log: Logger;
  readonly #retryMs: number;
  readonly #ipv6NodePortAddresses: () => readonly string[];
  /** What each Service wants: frontend key → spec (a Service being deleted wants nothing). */
  readonly #wanted = new Map<string, Map<string, ServiceSpec>>();
  /** Frontend key → the Service holding it and its ID. A frontend two Services want is the first one's. */
  readonly #held = new Map<string, Held>();
  /** Frontend keys per Service holding them. */
  readonly #heldBy = new Map<string, Set<string>>();
  /** The Service (`namespace/name`) holding each ID: what a flow translated for that ID is called. */
  readonly #keyById = new Map<number, string>();
  /**
   * Services in the Kubernetes range the API had when this sync began (restored
   * ones), by frontend, not yet taken by a Service: a Service wanting one of
   * these frontends takes its ID.
   */
  #unclaimed: Map<string, number> | undefined;
  /** IDs in use: held, unclaimed, or whose deletion failed. */
  readonly #usedIds = new Set<number>();
  /** Frontends to write again (the datapath failed them). */
  readonly #retry = new Set<string>();
  /** IDs whose deletion failed: deleted again on the next retry. */
  readonly #pendingDeletes = new Map<number, string>();
  /** What each Service could not serve, as last logged (logged again when it changes). */
  readonly #skippedLogged = new Map<string, string>();
  /** Updates waiting in the queue, by Service: a later call for the same Service replaces the state it applies. */
  readonly #queued = new Map<string, QueuedUpdate>();
  readonly #serial = new Serializer();
  /** The healthCheckNodePort servers, when asked for. */
  readonly healthChecks: HealthCheckNodePorts | undefined;
  /** While a drain runs: the changes its Services make, applied as one batch at its end. */
  #batch: BatchedChange[] | undefined;
  #retryTimer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(o: ServiceSyncOptions) {
    this.#services = o.services;
    this.#log = o.logger.child({ component: 'k8s-services', node: o.nodeName });
    this.healthChecks = o.healthCheckNodePorts
      ? new HealthCheckNodePorts({ logger: this.#log, localEndpoints: (key) => this.localEndpoints(key), ...(o.healthCheckNodePorts.host !== undefined ? { host: o.healthCheckNodePorts.host } : {}) })
      : undefined;
    this.#retryMs = o.retryIntervalMs ?? DEFAULT_RETRY_MS;
    this.#ipv6NodePortAddresses = o.ipv6NodePortAddresses ?? (() => []);
  }

  /**
   * The desired state of one Service (undefined: deleted) with all its
   * EndpointSlices; applies the difference. Calls are serialized. The
   * agent's services must be restored before the first call (restored
   * frontends keep their IDs).
   */
  update(key: string, svc: V1Service | undefined, slices: readonly V1EndpointSlice[]): Promise<void> {
    // A burst of changes to one Service (a rollout moving endpoints slice by slice) is applied once, in its latest state.
    const queued = this.#queued.get(key);
    if (queued) {
      queued.svc = svc;
      queued.slices = slices;
      return queued.done;
    }
    const entry: QueuedUpdate = { svc, slices, done: Promise.resolve() };
    this.#queued.set(key, entry);
    entry.done = this.#serial.run(() => this.#drain());
    return entry.done;
  }

  /**
   * Every Service queued so far, in one batch of the service API (the
   * initial list of 10,000 Services is a handful of batches, not 10,000
   * writes); a later call finds its Service already applied.
   */
  async #drain(): Promise<void> {
    if (this.#queued.size === 0) return;
    const entries = [...this.#queued];
    this.#queued.clear();
    this.#batch = [];
    try {
      for (const [key, e] of entries) await this.#update(key, e.svc, e.slices);
    } finally {
      const batch = this.#batch;
      this.#batch = undefined;
      await this.#flush(batch);
    }
  }

  /** Applies a drain's changes and files each outcome as a single call's would be. */
  async #flush(batch: readonly BatchedChange[]): Promise<void> {
    if (batch.length === 0) return;
    let results: ServiceChangeResult[];
    try {
      results = await this.#services.apply(batch.map((c) => (c.op === 'upsert' ? { upsert: { ...c.spec, id: c.id } } : { delete: c.id })));
    } catch (err) {
      // The batch failed whole (its records could not be written, no eBPF datapath): every change failed with that error.
      const error = { code: isServiceError(err) ? err.code : 'INTERNAL', message: (err as Error).message };
      results = batch.map((c) => ({ id: c.id, op: c.op, result: 'failed' as const, error }));
    }
    batch.forEach((c, i) => {
      const r = results[i]!;
      if (c.op === 'upsert') {
        if (r.result !== 'failed') {
          this.#retry.delete(c.fk);
          if (r.result !== 'unchanged') this.#log.debug({ service: c.key, frontend: c.fk, id: c.id, backends: c.spec['backend-addresses'].length, created: r.result === 'created' }, 'Kubernetes frontend written');
        } else this.#upsertFailed(c.key, c.fk, c.id, r.error!.code, r.error!.message);
        return;
      }
      if (r.result === 'failed') {
        // Taken again in the same batch by another frontend: that write replaced it, nothing is left to delete.
        if (this.#keyById.has(c.id)) return;
        this.#deleteFailed(c.id, c.fk, c.key, r.error!.code, r.error!.message);
      } else this.#log.debug({ service: c.key, frontend: c.fk, id: c.id }, 'Kubernetes frontend deleted');
    });
  }

  /**
   * After the initial list of services and slices: removes the services in
   * the Kubernetes range that no Service wants (left from before a restart).
   */
  initialSyncDone(): Promise<void> {
    return this.#serial.run(async () => {
      this.#index();
      let removed = 0;
      for (const s of this.#services.list()) {
        if (!isK8sServiceId(s.id)) continue;
        const fk = frontendOfStatus(s['frontend-address']);
        const held = this.#held.get(fk);
        if (held?.id === s.id) continue;
        if (!(await this.#delete(s.id, fk, undefined))) continue;
        removed++;
        // It had refused a Service's write of the same frontend under another ID: that write goes now.
        const spec = held && this.#wanted.get(held.key)?.get(fk);
        if (held && spec) await this.#upsert(held.key, fk, held.id, spec);
      }
      this.#log.info({ services: this.#wanted.size, frontends: this.#held.size, removed }, 'Kubernetes services synced');
    });
  }

  /** No more retries; waits for the calls queued so far. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    await this.#serial.settled();
    await this.healthChecks?.stop();
  }

  /**
   * The Service's ready endpoints on this node: the distinct active local
   * backends of the frontends it holds (what its healthCheckNodePort answers).
   */
  localEndpoints(key: string): number {
    const ready = new Set<string>();
    for (const fk of this.#heldBy.get(key) ?? []) {
      const held = this.#held.get(fk);
      const s = held && this.#services.get(held.id);
      for (const b of s?.['backend-addresses'] ?? []) if (b.local && b.state === 'active') ready.add(`${b.ip}:${b.port}`);
    }
    return ready.size;
  }

  // ---- internals ---------------------------------------------------------------

  /** The services the API holds in the Kubernetes range, read once (the first call). */
  #index(): void {
    if (this.#unclaimed) return;
    this.#unclaimed = new Map();
    for (const s of this.#services.list()) {
      if (!isK8sServiceId(s.id)) continue;
      this.#unclaimed.set(frontendOfStatus(s['frontend-address']), s.id);
      this.#usedIds.add(s.id);
    }
  }

  async #update(key: string, svc: V1Service | undefined, slices: readonly V1EndpointSlice[]): Promise<void> {
    this.#index();
    const wanted = new Map<string, ServiceSpec>();
    if (svc) {
      const { specs, skipped } = k8sServiceFrontends(svc, slices, { ipv6NodePortAddresses: this.#ipv6NodePortAddresses() });
      // A frontend listed twice (an external IP that is also a LoadBalancer IP) is served once.
      for (const spec of specs) if (!wanted.has(specFrontendKey(spec))) wanted.set(specFrontendKey(spec), spec);
      const skippedText = JSON.stringify(skipped);
      if (skipped.length > 0 && this.#skippedLogged.get(key) !== skippedText) this.#log.info({ service: key, skipped }, 'parts of a Kubernetes Service are not served');
      if (skipped.length > 0) this.#skippedLogged.set(key, skippedText);
      else this.#skippedLogged.delete(key);
    } else {
      this.#skippedLogged.delete(key);
    }
    if (wanted.size > 0) this.#wanted.set(key, wanted);
    else this.#wanted.delete(key);
    if (this.healthChecks) {
      const spec = svc?.spec;
      // The API server allocates the port; anything but a port number (an object written past its validation) opens nothing.
      const hc = spec?.healthCheckNodePort;
      const port = spec?.type === 'LoadBalancer' && spec.externalTrafficPolicy === 'Local' && Number.isInteger(hc) && hc! >= 1 && hc! <= 65535 ? hc : undefined;
      await this.healthChecks.set(key, port);
    }

    const released: string[] = [];
    for (const fk of [...(this.#heldBy.get(key) ?? [])]) {
      if (wanted.has(fk)) continue;
      const { id } = this.#held.get(fk)!;
      this.#release(key, fk);
      await this.#delete(id, fk, key);
      released.push(fk);
    }
    for (const [fk, spec] of wanted) await this.#claim(key, fk, spec);
    // A frontend this Service let go may be one another Service was refused.
    for (const fk of released) {
      for (const [other, w] of this.#wanted) {
        const spec = w.get(fk);
        if (other === key || spec === undefined) continue;
        await this.#claim(other, fk, spec);
        break;
      }
    }
  }

  /** Service `key` takes (or keeps) frontend fk and writes it. */
  async #claim(key: string, fk: string, spec: ServiceSpec): Promise<void> {
    const held = this.#held.get(fk);
    if (held && held.key !== key) {
      if (!outranks(spec, this.#wanted.get(held.key)?.get(fk))) {
        this.#log.warn({ service: key, frontend: fk, holder: held.key }, 'frontend already belongs to another Kubernetes Service; not served for this one');
        return;
      }
      // Another Service's external or LoadBalancer IP on a ClusterIP's address and port (the externalIPs
      // interception of CVE-2020-8554): the ClusterIP wins, whichever came first — after an agent restart
      // the order is the API server's listing order, which anyone naming a namespace can influence.
      this.#log.warn({ service: key, frontend: fk, holder: held.key }, 'a ClusterIP takes its frontend back from another Service\'s external or LoadBalancer IP');
      this.#release(held.key, fk);
      this.#hold(key, fk, held.id);
      await this.#upsert(key, fk, held.id, spec);
      return;
    }
    let id = held?.id;
    if (id === undefined) {
      id = this.#takeId(fk);
      if (id === undefined) {
        this.#log.error({ service: key, frontend: fk, range: `${K8S_SERVICE_ID_MIN}-${K8S_SERVICE_ID_MAX}` }, 'no free service ID for a Kubernetes frontend');
        return;
      }
      this.#hold(key, fk, id);
    }
    await this.#upsert(key, fk, id, spec);
  }

  /** The Service (`namespace/name`) that holds service ID `id`, if any. */
  serviceName(id: number): string | undefined {
    return this.#keyById.get(id);
  }

  #hold(key: string, fk: string, id: number): void {
    this.#held.set(fk, { key, id });
    this.#keyById.set(id, key);
    this.#usedIds.add(id);
    let set = this.#heldBy.get(key);
    if (!set) this.#heldBy.set(key, (set = new Set()));
    set.add(fk);
  }

  #release(key: string, fk: string): void {
    const held = this.#held.get(fk);
    this.#held.delete(fk);
    this.#retry.delete(fk);
    const set = this.#heldBy.get(key);
    set?.delete(fk);
    if (set?.size === 0) this.#heldBy.delete(key);
    if (held) {
      this.#usedIds.delete(held.id);
      this.#keyById.delete(held.id);
    }
  }

  /** The ID a frontend restored from before keeps, else the lowest free one of the range. */
  #takeId(fk: string): number | undefined {
    const restored = this.#unclaimed!.get(fk);
    if (restored !== undefined) {
      this.#unclaimed!.delete(fk);
      this.#pendingDeletes.delete(restored);
      return restored;
    }
    for (let id = K8S_SERVICE_ID_MIN; id <= K8S_SERVICE_ID_MAX; id++) {
      if (this.#usedIds.has(id)) continue;
      // Made through the API meanwhile (the range is a convention, not enforced there); one this drain deletes is free.
      if (this.#services.get(id) !== undefined && !this.#batch?.some((c) => c.op === 'delete' && c.id === id)) {
        this.#usedIds.add(id);
        continue;
      }
      this.#usedIds.add(id);
      return id;
    }
    return undefined;
  }

  /** Writes frontend fk under `id` (in a drain: as a change of its batch, its outcome filed at the flush). */
  async #upsert(key: string, fk: string, id: number, spec: ServiceSpec): Promise<void> {
    if (this.#batch) {
      this.#batch.push({ op: 'upsert', key, fk, id, spec });
      return;
    }
    try {
      const r = await this.#services.upsert(id, spec);
      this.#retry.delete(fk);
      if (r.changed) this.#log.debug({ service: key, frontend: fk, id, backends: spec['backend-addresses'].length, created: r.created }, 'Kubernetes frontend written');
    } catch (err) {
      this.#upsertFailed(key, fk, id, isServiceError(err) ? err.code : undefined, (err as Error).message);
    }
  }

  #upsertFailed(key: string, fk: string, id: number, code: string | undefined, error: string): void {
    // Refused as it is (invalid, a frontend the API's user holds, no eBPF datapath): written again only when the Service changes.
    const retried = code === undefined || code === ServiceErrorCode.DATAPATH_FAILED || code === 'INTERNAL';
    this.#log.warn({ service: key, frontend: fk, id, code, error, retried }, 'Kubernetes frontend refused by the service API');
    if (retried) {
      this.#retry.add(fk);
      this.#scheduleRetry();
    }
  }

  /**
   * Deletes service `id`; false when that failed (retried later). In a drain
   * it is a change of the batch, taken as done until the flush says otherwise.
   */
  async #delete(id: number, fk: string, key: string | undefined): Promise<boolean> {
    if (this.#batch) {
      this.#batch.push({ op: 'delete', key, fk, id });
    } else {
      try {
        await this.#services.delete(id);
        this.#log.debug({ service: key, frontend: fk, id }, 'Kubernetes frontend deleted');
      } catch (err) {
        if (!isServiceError(err, ServiceErrorCode.NOT_FOUND)) {
          this.#deleteFailed(id, fk, key, isServiceError(err) ? err.code : undefined, (err as Error).message);
          return false;
        }
      }
    }
    this.#unclaimed!.delete(fk);
    this.#pendingDeletes.delete(id);
    // Never held at the same time: a frontend is released before its service is deleted.
    this.#usedIds.delete(id);
    return true;
  }

  #deleteFailed(id: number, fk: string, key: string | undefined, code: string | undefined, error: string): void {
    this.#log.warn({ service: key, frontend: fk, id, code, error }, 'deleting a Kubernetes frontend failed; retried');
    // Still there under its ID: a Service wanting the frontend again takes it back.
    this.#unclaimed!.set(fk, id);
    this.#usedIds.add(id);
    this.#pendingDeletes.set(id, fk);
    this.#scheduleRetry();
  }

  #scheduleRetry(): void {
    if (this.#stopped || this.#retryTimer !== undefined) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      void this.#serial.run(() => this.#retryFailed()).catch((err: unknown) => this.#log.error({ err }, 'retrying Kubernetes frontends failed'));
    }, this.#retryMs);
    this.#retryTimer.unref();
  }

  async #retryFailed(): Promise<void> {
    for (const [id, fk] of [...this.#pendingDeletes]) {
      if (this.#held.get(fk)?.id === id) {
        this.#pendingDeletes.delete(id);
        continue;
      }
      await this.#delete(id, fk, undefined);
    }
    for (const fk of [...this.#retry]) {
      const held = this.#held.get(fk);
      const spec = held && this.#wanted.get(held.key)?.get(fk);
      this.#retry.delete(fk);
      if (held && spec) await this.#upsert(held.key, fk, held.id, spec);
    }
  }
}
