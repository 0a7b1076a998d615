/**
 * Node liveness in the Kubernetes API: one coordination.k8s.io/v1 Lease per
 * node, `tendril-node-<node>` in tendril's namespace, held by the node
 * (holderIdentity) and renewed every third of its leaseDurationSeconds. A
 * node is alive while `now < renewTime + leaseDurationSeconds` on the
 * reader's clock (the kubelet's node Leases work the same way).
 *
 * NodeLeaseWriter keeps this node's Lease renewed; NodeLeaseFollower mirrors
 * every node's Lease and says who is alive, with a callback when a node
 * becomes alive or expires. The follower does not poll: one timer waits for
 * the earliest expiry among live nodes.
 *
 * A clean stop leaves the Lease as it is: an agent restarted within the
 * lease duration keeps its node alive for the others throughout.
 *
 * An API server outage stops every renewal at once, and the follower cannot
 * tell that from every node dying: while its watch is down it lets no Lease
 * run out (what is in force stays), and once the watch is back every node
 * gets one more lease duration from then to renew before it counts as gone
 * (the node lifecycle controller holds evictions in a full disruption for
 * the same reason).
 */
import { CoordinationV1Api, V1MicroTime, type KubeConfig, type KubernetesListObject, type V1Lease, type V1OwnerReference } from '@kubernetes/client-node';
import { Backoff } from '../async/backoff.js';
import { Serializer } from '../async/keyedSerializer.js';
import type { Logger } from '../logging/logger.js';
import { K8sConfigError } from './errors.js';
import { describeK8sError, httpStatusOf, ResourceInformer } from './resourceInformer.js';
import { DEFAULT_RETRY, type RetryOptions } from './types.js';

export const NODE_LEASE_PREFIX = 'tendril-node-';
export const NODE_LEASE_LABEL = 'tendril.io/node-lease';
export const NODE_LEASE_SELECTOR = `${NODE_LEASE_LABEL}=true`;

export function nodeLeaseName(nodeName: string): string {
  return `${NODE_LEASE_PREFIX}${nodeName}`;
}

/** A MicroTime field as milliseconds: the client's model gives a Date, wire JSON a string. */
function timeMs(t: unknown): number | undefined {
  if (t instanceof Date) return t.getTime();
  if (typeof t !== 'string') return undefined;
  const ms = Date.parse(t);
  return Number.isNaN(ms) ? undefined : ms;
}

/** When a Lease runs out (ms since the epoch), or undefined when it says nothing usable. */
export function leaseExpiryMs(lease: V1Lease): number | undefined {
  const spec = lease.spec;
  const renewed = timeMs(spec?.renewTime) ?? timeMs(spec?.acquireTime);
  const seconds = spec?.leaseDurationSeconds;
  if (renewed === undefined || typeof seconds !== 'number' || !(seconds > 0)) return undefined;
  return renewed + seconds * 1000;
}

/** The node a Lease stands for: its holder, when the name is that holder's node lease name. */
export function nodeOfLease(lease: V1Lease): string | undefined {
  const holder = lease.spec?.holderIdentity;
  if (typeof holder !== 'string' || holder === '' || lease.metadata?.name !== nodeLeaseName(holder)) return undefined;
  return holder;
}

export interface NodeLeaseWriterOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  nodeName: string;
  /** leaseDurationSeconds; renewed every third of it. */
  ttlSeconds: number;
  logger: Logger;
  /** Delays of retries after a failed renewal (never longer than the renewal period). */
  retry?: RetryOptions;
  /** The Lease's owner when it is created (the Node object, as the kubelet's node Lease has): it goes with the Node. */
  owner?: () => Promise<V1OwnerReference | undefined>;
}

/** A 409 on every try means another writer renews the same Lease as fast as we do (two agents with one node name). */
const MAX_CONFLICTS = 5;

export class NodeLeaseWriter {
  readonly #api: CoordinationV1Api;
  readonly #o: NodeLeaseWriterOptions;
  readonly #log: Logger;
  readonly #name: string;
  readonly #renewMs: number;
  readonly #backoff: Backoff;
  readonly #writes = new Serializer();
  /** The Lease as last read or written (its resourceVersion is the precondition of the next update). */
  #current: V1Lease | undefined;
  /** When the Lease last stood renewed by us (ms), to tell a renewal after a lapse. */
  #validUntil = 0;
  #timer: NodeJS.Timeout | undefined;
  #running = false;
  /** Successful writes (creates and renewals), and the 409s they met. */
  writes = 0;
  conflicts = 0;

  constructor(o: NodeLeaseWriterOptions) {
    this.#o = o;
    this.#log = o.logger;
    this.#name = nodeLeaseName(o.nodeName);
    this.#renewMs = Math.max(1, Math.floor((o.ttlSeconds * 1000) / 3));
    const retry = o.retry ?? DEFAULT_RETRY;
    this.#backoff = new Backoff({ initialMs: Math.min(retry.initialMs, this.#renewMs), maxMs: Math.min(retry.maxMs, this.#renewMs) });
    this.#api = o.kubeConfig.makeApiClient(CoordinationV1Api);
  }

  get name(): string {
    return this.#name;
  }

  /** Creates or renews the Lease once (failures reject), then renews it in the background. */
  async start(): Promise<void> {
    if (this.#running) return;
    this.#running = true;
    try {
      await this.#writes.run(() => this.#renew());
    } catch (err) {
      this.#running = false;
      throw err;
    }
    this.#schedule(this.#renewMs);
  }

  /** Renews now (the Lease was seen deleted or changed by someone else); failures go to the background retry. */
  renewSoon(): void {
    if (!this.#running) return;
    this.#schedule(0);
  }

  /** Stops renewing; the Lease stays and runs out on its own unless a restarted agent renews it. */
  async stop(): Promise<void> {
    this.#running = false;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#writes.idle();
  }

  #schedule(delayMs: number): void {
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#tick();
    }, delayMs);
  }

  async #tick(): Promise<void> {
    if (!this.#running) return;
    try {
      await this.#writes.run(() => this.#renew());
      this.#backoff.reset();
      if (this.#running && this.#timer === undefined) this.#schedule(this.#renewMs);
    } catch (err) {
      const delay = this.#backoff.next();
      this.#log.warn({ lease: this.#name, error: describeK8sError(err), retryInMs: delay }, 'cannot renew the node lease; retrying');
      if (this.#running && this.#timer === undefined) this.#schedule(delay);
    }
  }

  #body(now: V1MicroTime, owner?: V1OwnerReference): V1Lease {
    const prev = this.#current;
    return {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: {
        ...(owner === undefined ? {} : { ownerReferences: [owner] }),
        ...(prev?.metadata ?? {}),
        name: this.#name,
        namespace: this.#o.namespace,
        labels: { ...(prev?.metadata?.labels ?? {}), 'app.kubernetes.io/part-of': 'tendril', [NODE_LEASE_LABEL]: 'true' },
      },
      spec: {
        ...(prev?.spec ?? {}),
        holderIdentity: this.#o.nodeName,
        leaseDurationSeconds: this.#o.ttlSeconds,
        acquireTime: prev?.spec?.acquireTime ?? now,
        renewTime: now,
      },
    };
  }

  /** One renewal: update with the last resourceVersion; 409 → read again and retry; 404 → create. */
  async #renew(): Promise<void> {
    const namespace = this.#o.namespace;
    for (let attempt = 0; attempt <= MAX_CONFLICTS; attempt++) {
      if (this.#current === undefined) {
        try {
          this.#current = await this.#api.readNamespacedLease({ namespace, name: this.#name });
        } catch (err) {
          if (httpStatusOf(err) !== 404) throw err;
        }
      }
      const owner = this.#current === undefined ? await this.#o.owner?.() : undefined;
      const now = new V1MicroTime();
      try {
        this.#current =
          this.#current === undefined
            ? await this.#api.createNamespacedLease({ namespace, body: this.#body(now, owner) })
            : await this.#api.replaceNamespacedLease({ namespace, name: this.#name, body: this.#body(now) });
      } catch (err) {
        const status = httpStatusOf(err);
        // A create's 404 is the namespace: no retry makes it appear.
        if (status === 404 && this.#current === undefined) {
          throw new K8sConfigError(`cannot create node lease ${namespace}/${this.#name}: namespace ${JSON.stringify(namespace)} not found (the agent's --k8s-namespace)`, { cause: err });
        }
        // 409: a stale resourceVersion (someone else wrote it) or a create racing one; 404: deleted under us.
        if (status !== 409 && status !== 404) throw err;
        if (status === 409) this.conflicts++;
        this.#current = undefined;
        continue;
      }
      this.writes++;
      const t = now.getTime();
      if (this.#validUntil !== 0 && t > this.#validUntil) {
        this.#log.info({ lease: this.#name, lapsedMs: t - this.#validUntil }, 'node lease renewed after it had run out: other nodes saw this node gone meanwhile');
      }
      this.#validUntil = t + this.#o.ttlSeconds * 1000;
      return;
    }
    throw new Error(`node lease ${this.#o.namespace}/${this.#name}: ${MAX_CONFLICTS + 1} conflicting updates in a row (another agent with node name ${this.#o.nodeName}?)`);
  }
}

/** How often a follower whose watch is down looks whether it is back (only then). */
const HOLD_CHECK_MS = 500;

export interface NodeLeaseFollowerOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  logger: Logger;
  retry?: RetryOptions;
  /** A node became alive (its Lease renewed in time) or ran out (expired, deleted). */
  onChange: (node: string, alive: boolean) => void;
}

export class NodeLeaseFollower {
  readonly informer: ResourceInformer<V1Lease>;
  readonly #log: Logger;
  readonly #onChange: (node: string, alive: boolean) => void;
  /** Lease name → its node, when it runs out as written, and its duration (ms). */
  readonly #leases = new Map<string, { node: string; expiry: number; durationMs: number }>();
  readonly #alive = new Set<string>();
  #timer: NodeJS.Timeout | undefined;
  #timerAt = Infinity;
  #stopped = false;
  /** The watch was connected once (an outage is a loss after that). */
  #wasConnected = false;
  /** While the watch is down: expiries are held. */
  #holding = false;
  /** When the watch came back after an outage: no Lease runs out before this plus its duration. */
  #resumedAt = 0;

  constructor(o: NodeLeaseFollowerOptions) {
    this.#log = o.logger;
    this.#onChange = o.onChange;
    const api = o.kubeConfig.makeApiClient(CoordinationV1Api);
    this.informer = new ResourceInformer<V1Lease>({
      resource: 'leases',
      kubeConfig: o.kubeConfig,
      path: `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(o.namespace)}/leases`,
      list: () => api.listNamespacedLease({ namespace: o.namespace, labelSelector: NODE_LEASE_SELECTOR }) as Promise<KubernetesListObject<V1Lease>>,
      labelSelector: NODE_LEASE_SELECTOR,
      model: 'V1Lease',
      logger: o.logger,
      ...(o.retry === undefined ? {} : { retry: o.retry }),
    });
    this.informer.on('add', (l) => this.#upsert(l));
    this.informer.on('update', (l) => this.#upsert(l));
    this.informer.on('delete', (l) => this.#delete(l));
  }

  start(): void {
    this.informer.start();
  }

  get synced(): Promise<void> {
    return this.informer.synced;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.informer.stop();
  }

  /** Whether the node's Lease is renewed and not run out, on this node's clock. */
  isAlive(node: string): boolean {
    return this.#alive.has(node);
  }

  /** When the node's Lease runs out (ms), if it has one: as written, or later after an outage of the watch. */
  expiresAt(node: string): number | undefined {
    const l = this.#leases.get(nodeLeaseName(node));
    return l === undefined ? undefined : this.#effective(l);
  }

  #effective(l: { expiry: number; durationMs: number }): number {
    return this.#resumedAt === 0 ? l.expiry : Math.max(l.expiry, this.#resumedAt + l.durationMs);
  }

  #upsert(lease: V1Lease): void {
    const name = lease.metadata?.name ?? '';
    const node = nodeOfLease(lease);
    const expiry = node === undefined ? undefined : leaseExpiryMs(lease);
    if (node === undefined || expiry === undefined) {
      this.#log.error({ lease: name, holder: lease.spec?.holderIdentity }, 'node lease names no node or no renewal time; ignored');
      this.informer.noteError(`Lease ${name}: not a node lease (holderIdentity, renewTime, leaseDurationSeconds)`);
      this.#drop(name);
      return;
    }
    if (this.informer.connected) this.#wasConnected = true;
    const old = this.#leases.get(name);
    if (old !== undefined && old.node !== node) this.#drop(name);
    const entry = { node, expiry, durationMs: (lease.spec?.leaseDurationSeconds ?? 0) * 1000 };
    this.#leases.set(name, entry);
    const effective = this.#effective(entry);
    // Held during an outage: a Lease seen alive stays so until the watch is back.
    if (!(this.#holding && this.#alive.has(node))) this.#evaluate(node, effective);
    if (effective < this.#timerAt) this.#arm();
  }

  #delete(lease: V1Lease): void {
    this.#drop(lease.metadata?.name ?? '');
  }

  #drop(leaseName: string): void {
    const old = this.#leases.get(leaseName);
    if (old === undefined) return;
    this.#leases.delete(leaseName);
    this.#evaluate(old.node, undefined);
  }

  #evaluate(node: string, expiry: number | undefined): void {
    const alive = expiry !== undefined && expiry > Date.now();
    if (alive === this.#alive.has(node)) return;
    if (alive) this.#alive.add(node);
    else this.#alive.delete(node);
    try {
      this.#onChange(node, alive);
    } catch (err) {
      this.#log.error({ err, node, alive }, 'node lease listener threw');
    }
  }

  /** One timer at the earliest expiry among live nodes; when it fires, those that ran out are reported. */
  #arm(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Infinity;
    if (this.#stopped) return;
    let next = Infinity;
    for (const l of this.#leases.values()) {
      const at = this.#effective(l);
      if (this.#alive.has(l.node) && at < next) next = at;
    }
    if (next === Infinity) return;
    this.#timerAt = next;
    this.#timer = setTimeout(() => this.#expire(), Math.max(0, next - Date.now()) + 1);
    this.#timer.unref();
  }

  #expire(): void {
    this.#timer = undefined;
    this.#timerAt = Infinity;
    if (this.#stopped) return;
    const connected = this.informer.connected;
    if (connected) this.#wasConnected = true;
    if (!connected && this.#wasConnected) {
      // The watch is down: renewals may be happening unseen (or no one can renew). Hold, and look again shortly.
      if (!this.#holding) this.#log.warn('node lease watch down: no node counts as gone until it is back');
      this.#holding = true;
      this.#timerAt = -Infinity;
      this.#timer = setTimeout(() => this.#expire(), HOLD_CHECK_MS);
      this.#timer.unref();
      return;
    }
    if (this.#holding) {
      this.#holding = false;
      this.#resumedAt = Date.now();
      this.#log.info('node lease watch back: every node has one lease duration from now to renew');
    }
    for (const l of [...this.#leases.values()]) if (this.#alive.has(l.node)) this.#evaluate(l.node, this.#effective(l));
    this.#arm();
  }
}
