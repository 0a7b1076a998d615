/**
 * Leader election on a coordination.k8s.io/v1 Lease, as client-go's
 * LeaseLock does it (@kubernetes/client-node 1.4 ships none): the holder
 * writes spec.renewTime every leaseDuration/3; anyone may take a Lease whose
 * holder is empty or whose renewTime + leaseDurationSeconds has passed. Every
 * write carries the resourceVersion it read, so of two candidates racing for
 * an expired Lease exactly one wins (the other's update is 409).
 *
 * Safety: a leader whose renewals fail steps down (onStoppedLeading) once
 * 2/3 of the lease duration has passed since the send time of its last
 * successful renewal — a third of the duration before any other candidate
 * may take over, which absorbs request latency and moderate clock skew
 * (candidates judge expiry by renewTime, written by the leader's clock).
 * A clean stop releases the Lease (holder '', duration 1 s) after the
 * controllers stopped, so a follower takes over at once.
 */
import { CoordinationV1Api, V1MicroTime, type KubeConfig, type V1Lease } from '@kubernetes/client-node';
import type { Logger } from '../logging/logger.js';
import { describeK8sError, httpStatusOf } from '../k8s/resourceInformer.js';
import { leaseTimeMs } from './operatorApi.js';

export interface LeaderElectorOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  /** The Lease's name. */
  name: string;
  /** Who we are in spec.holderIdentity. */
  identity: string;
  /** spec.leaseDurationSeconds: whole seconds, ≥ 1. */
  leaseDurationSeconds: number;
  logger: Logger;
  /** Called when this process becomes the leader; the controllers start here (not awaited: renewals go on meanwhile). */
  onStartedLeading(): void | Promise<void>;
  /** Called when it stops being the leader (lost, renew deadline passed, or stop()); resolves when the controllers stopped. */
  onStoppedLeading(reason: string): void | Promise<void>;
  /** An API request of the election failed (for the operator's error counter). */
  onApiError?(operation: string): void;
}

/** What the elector last saw of the Lease. */
export interface ObservedLeader {
  holder: string;
  /** Local time (ms) until which the holder's lease runs: renewTime + leaseDurationSeconds. */
  expiresAt: number;
}

export class LeaderElector {
  readonly identity: string;
  readonly #o: LeaderElectorOptions;
  readonly #api: CoordinationV1Api;
  readonly #log: Logger;
  readonly #durationMs: number;
  #leading = false;
  #stopped = false;
  #timer: NodeJS.Timeout | undefined;
  #deadline: NodeJS.Timeout | undefined;
  /** The Lease as our last successful write returned it (while leading). */
  #ours: V1Lease | undefined;
  #observed: ObservedLeader | undefined;
  /** Serializes attempts and leadership transitions: one at a time. */
  #chain: Promise<void> = Promise.resolve();

  constructor(o: LeaderElectorOptions) {
    if (!Number.isInteger(o.leaseDurationSeconds) || o.leaseDurationSeconds < 1) throw new RangeError('leaseDurationSeconds must be a whole number ≥ 1');
    this.#o = o;
    this.identity = o.identity;
    this.#durationMs = o.leaseDurationSeconds * 1000;
    this.#api = o.kubeConfig.makeApiClient(CoordinationV1Api);
    this.#log = o.logger.child({ lease: `${o.namespace}/${o.name}`, identity: o.identity });
  }

  get isLeader(): boolean {
    return this.#leading;
  }

  /** The holder last seen and until when its lease runs (ours included). */
  get observed(): ObservedLeader | undefined {
    return this.#observed;
  }

  /** A leader holds an unexpired Lease, by what we last saw. */
  leaderLive(now = Date.now()): boolean {
    if (this.#leading) return true;
    const o = this.#observed;
    return o !== undefined && o.holder !== '' && now < o.expiresAt;
  }

  get #renewEveryMs(): number {
    return this.#durationMs / 3;
  }

  get #renewDeadlineMs(): number {
    return (this.#durationMs * 2) / 3;
  }

  start(): void {
    this.#schedule(0);
  }

  /** Someone changed the Lease (an informer saw it): a follower looks again now instead of at its next turn. */
  poke(lease?: V1Lease): void {
    if (lease !== undefined) this.#observe(lease);
    if (!this.#leading && !this.#stopped) this.#schedule(0);
  }

  /** Stops trying; a leader stops its controllers, then releases the Lease so another takes over at once. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#enqueue(async () => {
      if (!this.#leading) return;
      const ours = this.#ours;
      await this.#stepDown('stopping');
      if (ours !== undefined) await this.#release(ours);
    });
  }

  #enqueue(step: () => Promise<void>): Promise<void> {
    const next = this.#chain.then(step, step);
    this.#chain = next.catch(() => undefined);
    return next;
  }

  #schedule(ms: number): void {
    if (this.#stopped) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#enqueue(() => this.#tick());
    }, Math.max(0, ms));
  }

  async #tick(): Promise<void> {
    if (this.#stopped) return;
    let next: number;
    try {
      next = this.#leading ? await this.#renew() : await this.#tryAcquire();
    } catch (err) {
      this.#o.onApiError?.(this.#leading ? 'lease-renew' : 'lease-acquire');
      this.#log.warn({ error: describeK8sError(err) }, this.#leading ? 'renewing the leader lease failed' : 'reading the leader lease failed');
      next = Math.max(100, this.#durationMs / 10);
    }
    this.#schedule(next);
  }

  #observe(lease: V1Lease): void {
    const spec = lease.spec ?? {};
    const renewed = leaseTimeMs(spec.renewTime ?? spec.acquireTime);
    const duration = (spec.leaseDurationSeconds ?? 0) * 1000;
    this.#observed = { holder: spec.holderIdentity ?? '', expiresAt: Number.isNaN(renewed) ? 0 : renewed + duration };
  }

  /** One candidate's round; returns when to look again. */
  async #tryAcquire(): Promise<number> {
    let current: V1Lease;
    try {
      current = await this.#api.readNamespacedLease({ namespace: this.#o.namespace, name: this.#o.name });
    } catch (err) {
      if (httpStatusOf(err) !== 404) throw err;
      return this.#create();
    }
    this.#observe(current);
    const o = this.#observed!;
    const now = Date.now();
    if (o.holder !== '' && o.holder !== this.identity && now < o.expiresAt) {
      // Look again when it would expire unless renewed (an informer event pokes us sooner).
      return Math.min(this.#renewEveryMs, o.expiresAt - now + 20);
    }
    const spec = current.spec ?? {};
    const sent = new V1MicroTime();
    const mine = o.holder === this.identity;
    const body: V1Lease = {
      ...current,
      spec: {
        ...spec,
        holderIdentity: this.identity,
        leaseDurationSeconds: this.#o.leaseDurationSeconds,
        renewTime: sent,
        acquireTime: mine && spec.acquireTime !== undefined ? spec.acquireTime : sent,
        leaseTransitions: (spec.leaseTransitions ?? 0) + (mine ? 0 : 1),
      },
    };
    try {
      const written = await this.#api.replaceNamespacedLease({ namespace: this.#o.namespace, name: this.#o.name, body });
      await this.#becomeLeader(written, sent.getTime(), mine ? 'renewed our own lease' : `took over from ${JSON.stringify(o.holder)}`);
      return this.#renewEveryMs;
    } catch (err) {
      // Another candidate wrote first: it leads.
      if (httpStatusOf(err) === 409) return 50;
      throw err;
    }
  }

  async #create(): Promise<number> {
    const sent = new V1MicroTime();
    const body: V1Lease = {
      metadata: { name: this.#o.name, namespace: this.#o.namespace, labels: { 'app.kubernetes.io/part-of': 'tendril' } },
      spec: { holderIdentity: this.identity, leaseDurationSeconds: this.#o.leaseDurationSeconds, acquireTime: sent, renewTime: sent, leaseTransitions: 0 },
    };
    try {
      const written = await this.#api.createNamespacedLease({ namespace: this.#o.namespace, body });
      await this.#becomeLeader(written, sent.getTime(), 'created the lease');
      return this.#renewEveryMs;
    } catch (err) {
      if (httpStatusOf(err) === 409) return 50;
      throw err;
    }
  }

  async #becomeLeader(written: V1Lease, sentAt: number, how: string): Promise<void> {
    this.#ours = written;
    this.#observe(written);
    this.#armDeadline(sentAt);
    this.#leading = true;
    this.#log.info({ how }, 'became the leader');
    // Not awaited: renewals must not wait for the controllers' start-up (they wait for their caches).
    void Promise.resolve()
      .then(() => this.#o.onStartedLeading())
      .catch((err: unknown) => this.#log.error({ err }, 'starting the controllers failed'));
  }

  /** The leader's renewal; returns when to renew again. */
  async #renew(): Promise<number> {
    const ours = this.#ours!;
    const sent = new V1MicroTime();
    const body: V1Lease = { ...ours, spec: { ...ours.spec, renewTime: sent } };
    try {
      const written = await this.#api.replaceNamespacedLease({ namespace: this.#o.namespace, name: this.#o.name, body });
      if (!this.#leading) return 0;
      this.#ours = written;
      this.#observe(written);
      this.#armDeadline(sent.getTime());
      return this.#renewEveryMs;
    } catch (err) {
      if (httpStatusOf(err) !== 409 && httpStatusOf(err) !== 404) throw err;
    }
    // Someone else wrote the Lease: ours only if it still names us (an edit of its labels, say).
    let current: V1Lease | undefined;
    try {
      current = await this.#api.readNamespacedLease({ namespace: this.#o.namespace, name: this.#o.name });
    } catch (err) {
      if (httpStatusOf(err) !== 404) throw err;
    }
    if (current !== undefined) this.#observe(current);
    if (current?.spec?.holderIdentity === this.identity) {
      this.#ours = current;
      return 0;
    }
    await this.#stepDown(`the lease now names ${JSON.stringify(current?.spec?.holderIdentity ?? '(deleted)')}`);
    return 0;
  }

  /** Steps down if no renewal sent after `sentAt` succeeds within the renew deadline. */
  #armDeadline(sentAt: number): void {
    clearTimeout(this.#deadline);
    this.#deadline = setTimeout(
      () => {
        this.#deadline = undefined;
        // Not through the chain: a renewal hanging on a dead connection must not delay this.
        void this.#stepDown(`no renewal succeeded within ${this.#renewDeadlineMs} ms`).then(() => this.#schedule(0));
      },
      Math.max(0, sentAt + this.#renewDeadlineMs - Date.now()),
    );
  }

  async #stepDown(reason: string): Promise<void> {
    clearTimeout(this.#deadline);
    this.#deadline = undefined;
    if (!this.#leading) return;
    this.#leading = false;
    this.#ours = undefined;
    this.#log.warn({ reason }, 'stepped down as leader');
    try {
      await this.#o.onStoppedLeading(reason);
    } catch (err) {
      this.#log.error({ err }, 'stopping the controllers failed');
    }
  }

  async #release(ours: V1Lease): Promise<void> {
    const body: V1Lease = { ...ours, spec: { ...ours.spec, holderIdentity: '', leaseDurationSeconds: 1, renewTime: new V1MicroTime() } };
    try {
      await this.#api.replaceNamespacedLease({ namespace: this.#o.namespace, name: this.#o.name, body });
      this.#log.info('released the leader lease');
    } catch (err) {
      // Not fatal: the Lease expires on its own one duration after the last renewal.
      this.#o.onApiError?.('lease-release');
      this.#log.warn({ error: describeK8sError(err) }, 'releasing the leader lease failed; it expires on its own');
    }
  }
}
