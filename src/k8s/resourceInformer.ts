/**
 * One watched resource: the client's informer (list, then watch from the
 * list's resourceVersion, bookmarks, a relist after 410 Gone that reports
 * what vanished meanwhile as deletes) plus what it leaves to its caller:
 * a restart with exponential back-off after an error (the informer stops
 * there), a promise for the first list, status counters, and one object form.
 */
import { Backoff } from '../async/backoff.js';
import { ListWatch, Watch, type KubeConfig, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node';
import { ObjectSerializer } from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import type { Logger } from '../logging/logger.js';
import { K8sStoppedError } from './errors.js';
import { DEFAULT_RETRY, type K8sResourceStatus, type RetryOptions } from './types.js';

export type InformerEvent = 'add' | 'update' | 'delete';

export interface ResourceInformerOptions<T extends KubernetesObject> {
  /** The name in status ('pods', 'networkpolicies', …). */
  resource: string;
  kubeConfig: KubeConfig;
  /** The collection's path, watched with `?watch=true` (e.g. /api/v1/pods). */
  path: string;
  /** Lists the collection with the same selectors (one of the client's typed list calls); raw objects when `transform` turns them into T. */
  list: () => Promise<KubernetesListObject<T>> | Promise<KubernetesListObject<KubernetesObject>>;
  /**
   * The client's model name (V1Pod…). Lists come back as the model and watch
   * events as wire JSON; watch objects are turned into the model so the cache
   * holds one form. Custom resources have no model and stay JSON.
   */
  model?: string;
  /**
   * Turns each listed or watched object into what the cache keeps (it must
   * keep metadata.name, namespace and resourceVersion). For a resource
   * followed in bulk (every pod's TendrilEndpoint), keeping a few fields
   * instead of the client's whole object is most of the agent's memory.
   */
  transform?: (obj: KubernetesObject) => T;
  labelSelector?: string;
  fieldSelector?: string;
  /**
   * A resource the server may not serve (a CRD not installed): a 404 lists as
   * empty (so the informer counts as synced and anything cached is deleted)
   * and is retried at the longest back-off without counting as a lost connection.
   */
  optional?: boolean;
  logger: Logger;
  retry?: RetryOptions;
  /** The server ends each watch after this long (as client-go asks, 5–10 min); a new one resumes from the last resourceVersion. */
  watchTimeoutSeconds?: number;
}

/** The HTTP status of an API error (ApiException.code) or a watch error (statusCode). */
export function httpStatusOf(err: unknown): number | undefined {
  const e = err as { code?: unknown; statusCode?: unknown } | null | undefined;
  if (typeof e?.code === 'number') return e.code;
  if (typeof e?.statusCode === 'number') return e.statusCode;
  return undefined;
}

/** A short, one-line account of an API or connection error (ApiException messages carry whole bodies and headers). */
export function describeK8sError(err: unknown): string {
  if (err === null || err === undefined) return 'unknown error';
  const e = err as { body?: unknown; message?: unknown };
  const status = httpStatusOf(err);
  let detail: string | undefined;
  if (typeof e.body === 'object' && e.body !== null && typeof (e.body as { message?: unknown }).message === 'string') {
    detail = (e.body as { message: string }).message;
  } else if (typeof e.body === 'string') {
    try {
      const parsed = JSON.parse(e.body) as { message?: unknown };
      if (typeof parsed.message === 'string') detail = parsed.message;
    } catch {
      // not a Status body: fall back to the message
    }
  }
  detail ??= typeof e.message === 'string' ? e.message : String(err);
  const line = (detail.split('\n')[0] ?? detail).trim();
  const text = status === undefined ? line : `HTTP ${status}: ${line}`;
  return text.length > 300 ? `${text.slice(0, 297)}...` : text;
}

/**
 * The informer's Watch, with what the informer does not ask for itself:
 * bookmarks and a server-side timeout, a client-side watchdog for a server
 * that went silent, and hooks telling the owner a list was applied (the
 * informer always watches right after applying one) and a watch connected.
 */
class TrackedWatch extends Watch {
  readonly #controllers = new Set<AbortController>();
  #stopped = false;

  constructor(
    config: KubeConfig,
    private readonly hooks: {
      beforeWatch(): void;
      connected(): void;
      timeoutSeconds(): number;
      model?: string;
      transform?: (obj: KubernetesObject) => KubernetesObject;
    },
  ) {
    super(config);
  }

  override async watch(
    path: string,
    queryParams: Record<string, string | number | boolean | undefined>,
    callback: (phase: string, apiObj: unknown, watchObj?: unknown) => void,
    done: (err: unknown) => void,
  ): Promise<AbortController> {
    this.hooks.beforeWatch();
    if (this.#stopped) {
      const c = new AbortController();
      c.abort();
      done(new K8sStoppedError('a watch'));
      return c;
    }
    const timeoutSeconds = this.hooks.timeoutSeconds();
    const idleMs = (timeoutSeconds + 30) * 1000;
    // Set once super.watch() returns; the callbacks may run before that (a refused connection ends inside it).
    const open: { controller?: AbortController } = {};
    let failed = false;
    let idle: NodeJS.Timeout | undefined;
    const arm = () => {
      clearTimeout(idle);
      // Bookmarks and the server's own timeout keep a live watch talking; silence this long is a dead connection.
      idle = setTimeout(() => open.controller?.abort(), idleMs);
      idle.unref();
    };
    const { model, transform } = this.hooks;
    const onEvent = (phase: string, obj: unknown, watchObj?: unknown) => {
      arm();
      const isObject = phase === 'ADDED' || phase === 'MODIFIED' || phase === 'DELETED';
      const typed = model !== undefined && isObject ? ObjectSerializer.deserialize(obj, model, '') : obj;
      callback(phase, transform !== undefined && isObject ? transform(typed as KubernetesObject) : typed, watchObj);
    };
    const onDone = (err: unknown) => {
      failed = err !== null && err !== undefined;
      clearTimeout(idle);
      if (open.controller) this.#controllers.delete(open.controller);
      done(err);
    };
    const controller = await super.watch(path, { ...queryParams, allowWatchBookmarks: true, timeoutSeconds }, onEvent, onDone);
    open.controller = controller;
    if (this.#stopped) {
      controller.abort();
    } else if (!failed && !controller.signal.aborted) {
      this.#controllers.add(controller);
      arm();
      this.hooks.connected();
    }
    return controller;
  }

  /** Aborts every open watch, also one whose request was still connecting when the informer was stopped. */
  stop(): void {
    this.#stopped = true;
    for (const c of this.#controllers) c.abort();
    this.#controllers.clear();
  }

  restart(): void {
    this.#stopped = false;
  }
}

export class ResourceInformer<T extends KubernetesObject> {
  readonly resource: string;
  readonly #o: ResourceInformerOptions<T>;
  readonly #log: Logger;
  readonly #retry: RetryOptions;
  readonly #watch: TrackedWatch;
  readonly #informer: ListWatch<T>;
  readonly #handlers: Record<InformerEvent, Array<(obj: T) => void>> = { add: [], update: [], delete: [] };
  readonly #changeListeners = new Set<() => void>();
  readonly synced: Promise<void>;
  #resolveSynced!: () => void;
  #isSynced = false;
  #connected = false;
  #started = false;
  #stopped = false;
  #events = 0;
  #lastEventAt: string | undefined;
  #restarts = 0;
  readonly #backoff: Backoff;
  #lastError: string | undefined;
  #retryTimer: NodeJS.Timeout | undefined;
  #absent = false;
  #starting: Promise<void> | undefined;

  constructor(o: ResourceInformerOptions<T>) {
    this.resource = o.resource;
    this.#o = o;
    this.#log = o.logger.child({ resource: o.resource });
    this.#retry = o.retry ?? DEFAULT_RETRY;
    this.#backoff = new Backoff(this.#retry);
    this.synced = new Promise((resolve) => {
      this.#resolveSynced = resolve;
    });
    const timeoutSeconds = o.watchTimeoutSeconds;
    this.#watch = new TrackedWatch(o.kubeConfig, {
      beforeWatch: () => this.#markSynced(),
      connected: () => {
        if (!this.#connected && this.#restarts > 0) this.#log.info({ restarts: this.#restarts }, 'Kubernetes watch reconnected');
        this.#connected = true;
        this.#backoff.reset();
      },
      timeoutSeconds: () => timeoutSeconds ?? 300 + Math.floor(Math.random() * 300),
      ...(o.model !== undefined ? { model: o.model } : {}),
      ...(o.transform !== undefined ? { transform: o.transform } : {}),
    });
    this.#informer = new ListWatch<T>(o.path, this.#watch, () => this.#list(), false, o.labelSelector, o.fieldSelector);
    for (const event of ['add', 'update', 'delete'] as const) {
      this.#informer.on(event, (obj) => this.#dispatch(event, obj));
    }
    this.#informer.on('error', (err) => this.#onError(err));
  }

  /** Handlers run in the informer's callback; one that throws is logged and does not stop the informer. */
  on(event: InformerEvent, handler: (obj: T) => void): void {
    this.#handlers[event].push(handler);
  }

  /** Called on every add/update/delete and once the first list is in (for waiters on the cache). */
  onChange(listener: () => void): () => void {
    this.#changeListeners.add(listener);
    return () => this.#changeListeners.delete(listener);
  }

  get isSynced(): boolean {
    return this.#isSynced;
  }

  /** A watch is open; false from an error until a restarted watch connects (an optional resource the server lacks counts as connected). */
  get connected(): boolean {
    return this.#connected || this.#absent;
  }

  /** An optional resource the server does not serve (404). */
  get absent(): boolean {
    return this.#absent;
  }

  /** Records a problem with an object (an invalid policy) in status, beside connection errors. */
  noteError(message: string): void {
    this.#lastError = message;
  }

  get(name: string, namespace?: string): T | undefined {
    return this.#informer.get(name, namespace);
  }

  list(namespace?: string): readonly T[] {
    return this.#informer.list(namespace);
  }

  start(): void {
    if (this.#started) return;
    this.#started = true;
    this.#run();
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    this.#watch.stop();
    await this.#informer.stop();
    await this.#starting?.catch(() => undefined);
    // A watch the informer opened while stop() waited is aborted by the tracked Watch.
    this.#watch.stop();
    await this.#informer.stop();
    this.#changeListeners.clear();
  }

  status(): K8sResourceStatus {
    return {
      resource: this.resource,
      synced: this.#isSynced,
      objects: this.#informer.list().length,
      events: this.#events,
      ...(this.#lastEventAt !== undefined ? { lastEventAt: this.#lastEventAt } : {}),
      restarts: this.#restarts,
      ...(this.#lastError !== undefined ? { lastError: this.#lastError } : {}),
    };
  }

  async #list(): Promise<KubernetesListObject<T>> {
    if (this.#stopped) throw new K8sStoppedError(`the ${this.resource} list`);
    try {
      const list: KubernetesListObject<KubernetesObject> = await this.#o.list();
      this.#absent = false;
      const transform = this.#o.transform;
      return transform === undefined ? (list as KubernetesListObject<T>) : { ...list, items: list.items.map((o) => transform(o)) };
    } catch (err) {
      if (!this.#o.optional || httpStatusOf(err) !== 404) throw err;
      if (!this.#absent) this.#log.warn({ path: this.#o.path }, 'Kubernetes resource not served (CRD not installed?); treated as empty');
      this.#absent = true;
      this.#lastError = `${this.#o.path} not served by the API server (CRD not installed?)`;
      return { metadata: { resourceVersion: '' }, items: [] };
    }
  }

  #run(): void {
    if (this.#stopped) return;
    this.#watch.restart();
    // start() resolves once the list is in and the watch is open, or after an error it reported through 'error'.
    this.#starting = this.#informer.start().catch((err: unknown) => this.#onError(err));
  }

  #markSynced(): void {
    if (this.#isSynced) return;
    this.#isSynced = true;
    this.#log.debug({ objects: this.#informer.list().length }, 'Kubernetes resource listed');
    this.#resolveSynced();
    this.#notify();
  }

  #dispatch(event: InformerEvent, obj: T): void {
    this.#events++;
    this.#lastEventAt = new Date().toISOString();
    for (const h of this.#handlers[event]) {
      try {
        h(obj);
      } catch (err) {
        this.#log.error({ err, event, name: obj.metadata?.name, namespace: obj.metadata?.namespace }, 'Kubernetes event handler failed');
      }
    }
    this.#notify();
  }

  #notify(): void {
    for (const l of [...this.#changeListeners]) {
      try {
        l();
      } catch (err) {
        this.#log.error({ err }, 'Kubernetes cache listener failed');
      }
    }
  }

  #onError(err: unknown): void {
    if (this.#stopped) return;
    if (this.#retryTimer !== undefined) return;
    if (this.#absent && httpStatusOf(err) === 404) {
      this.#retryTimer = setTimeout(() => {
        this.#retryTimer = undefined;
        this.#run();
      }, this.#retry.maxMs);
      return;
    }
    this.#connected = false;
    this.#lastError = describeK8sError(err);
    const delay = this.#backoff.next();
    this.#restarts++;
    this.#log.warn({ error: this.#lastError, retryInMs: delay, restarts: this.#restarts }, 'Kubernetes watch failed; restarting');
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      this.#run();
    }, delay);
  }
}

/** Wire JSON of a model object (field names as the API spells them: `from`, not the model's `_from`). */
export function toWireJson(obj: unknown, model: string | undefined): Record<string, unknown> {
  const wire: unknown = model === undefined ? obj : ObjectSerializer.serialize(obj, model, '');
  return JSON.parse(JSON.stringify(wire ?? {})) as Record<string, unknown>;
}
