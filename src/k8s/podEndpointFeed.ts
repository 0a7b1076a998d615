/**
 * Which of this node's endpoints belong to a Kubernetes pod, with what the
 * pod's TendrilEndpoint says: the input of KubernetesIPCacheSync.
 *
 * It follows what the kvstore sync follows, the ipcache's `local` entries of
 * endpoints (owner `endpoint:<id>`, written when an endpoint gets or changes
 * its identity, withdrawn when it goes), and adds the pod: namespace and name
 * from the endpoint, uid from this node's pod cache (PodWatcher.pods). An
 * endpoint's entries change one address at a time, synchronously (the
 * binder's publish/withdraw loops): changes are gathered and reported once
 * per endpoint after the current task, so a dual-stack pod start is one
 * upsert, not two.
 *
 * The uid is taken once, when the endpoint is first reported: a pod deleted
 * and re-created under the same name while the old endpoint lingers must not
 * lend the old endpoint the new pod's uid. An endpoint whose pod is not (yet)
 * in the cache, or only a terminating pod of its name is, waits for it. Once
 * the pod leaves the API (or its name goes to another uid), the endpoint is
 * no longer reported: the pod's object is the garbage collector's. (An agent
 * restarted while a pod terminates therefore stops publishing that pod; the
 * CNI ADD's K8S_POD_UID, were it recorded in the endpoint, would settle both.)
 */
import type { Logger } from '../logging/logger.js';
import { IpcacheSource, type IPCache, type SourceChange } from '../ipcache/index.js';
import { formatIp, parsePrefix } from '../netip/index.js';
import { isPublishableIdentity, type PublishedEndpoint } from './tendrilEndpoint.js';

export type PublishedEndpointChange = { type: 'upsert'; endpoint: PublishedEndpoint } | { type: 'delete'; id: number };

/** What KubernetesIPCacheSync publishes: this node's pod endpoints. */
export interface PublishedEndpointSource {
  list(): PublishedEndpoint[];
  /**
   * Pods (`namespace/name`) with an endpoint here that is not reported yet
   * (its pod not in the cache yet): their objects are not stale.
   */
  waiting?(): Set<string>;
  /** Called for each change after subscribing; returns the unsubscribe. */
  subscribe(listener: (change: PublishedEndpointChange) => void): () => void;
}

/** The endpoint's pod (EndpointManager satisfies it). */
export interface EndpointPodLookup {
  get(id: number): { podNamespace?: string | undefined; podName?: string | undefined } | undefined;
}

/** This node's pods (PodWatcher.pods, a ResourceInformer<V1Pod>, satisfies it). */
export interface PodCache {
  get(name: string, namespace?: string): { metadata?: { uid?: string; deletionTimestamp?: Date | string } } | undefined;
  onChange(listener: () => void): () => void;
  /** The first list is in: a pod missing now is gone, not unseen. */
  readonly isSynced: boolean;
}

export interface PodEndpointFeedOptions {
  ipcache: IPCache;
  endpoints: EndpointPodLookup;
  pods: PodCache;
  logger?: Logger;
}

/** src/endpoint's endpointOwner(id). */
const OWNER = /^endpoint:([1-9][0-9]{0,9})$/;

interface Tracked {
  /** Address → identity, from the endpoint's local ipcache entries. */
  readonly addresses: Map<string, number>;
  /** The identity of the latest upsert (while a relabel rewrites the entries one by one, the newest). */
  identity: number;
  /** Fixed when first reported (see above). */
  pod?: { namespace: string; name: string; uid: string };
  /** The pod left the API (deleted; its object goes with it): nothing more is reported until the endpoint goes. */
  podGone?: boolean;
  reported?: PublishedEndpoint;
}

export class PodEndpointFeed implements PublishedEndpointSource {
  readonly #o: PodEndpointFeedOptions;
  readonly #tracked = new Map<number, Tracked>();
  /** Address → the endpoint whose local entry it is (the ipcache holds one per address: the newest writer's). */
  readonly #holder = new Map<string, number>();
  readonly #dirty = new Set<number>();
  readonly #listeners = new Set<(change: PublishedEndpointChange) => void>();
  readonly #unsubscribe: Array<() => void> = [];
  #scheduled = false;

  constructor(o: PodEndpointFeedOptions) {
    this.#o = o;
  }

  start(): void {
    const { ipcache, pods } = this.#o;
    this.#unsubscribe.push(ipcache.watchSource(IpcacheSource.Local, (c) => this.#onLocal(c)));
    // An endpoint waiting for its pod looks again whenever the pod cache changes; one whose pod went stops.
    this.#unsubscribe.push(pods.onChange(() => this.#onPods()));
    for (const entry of ipcache.listSource(IpcacheSource.Local)) this.#onLocal({ type: 'upsert', entry });
    this.#flush();
  }

  stop(): void {
    for (const u of this.#unsubscribe.splice(0)) u();
  }

  list(): PublishedEndpoint[] {
    return [...this.#tracked.values()].flatMap((t) => (t.reported === undefined ? [] : [t.reported]));
  }

  waiting(): Set<string> {
    const out = new Set<string>();
    for (const [id, t] of this.#tracked) {
      if (t.pod !== undefined || t.addresses.size === 0) continue;
      const ep = this.#o.endpoints.get(id);
      if (ep?.podNamespace && ep.podName) out.add(`${ep.podNamespace}/${ep.podName}`);
    }
    return out;
  }

  subscribe(listener: (change: PublishedEndpointChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #onLocal(change: SourceChange): void {
    const m = OWNER.exec(change.entry.owner);
    if (m === null) return;
    const id = Number(m[1]);
    // Only an endpoint's own address is an address of its pod (a /32 or /128).
    const prefix = parsePrefix(change.entry.prefix);
    if (prefix.length !== (prefix.family === 4 ? 32 : 128)) return;
    const ip = formatIp(prefix);
    let t = this.#tracked.get(id);
    if (change.type === 'upsert') {
      // An address another endpoint held is this one's now (the ipcache replaced that entry without a delete).
      const former = this.#holder.get(ip);
      if (former !== undefined && former !== id) {
        this.#tracked.get(former)?.addresses.delete(ip);
        this.#dirty.add(former);
      }
      this.#holder.set(ip, id);
      if (t === undefined) this.#tracked.set(id, (t = { addresses: new Map(), identity: change.entry.identity }));
      t.addresses.set(ip, change.entry.identity);
      t.identity = change.entry.identity;
    } else {
      if (t === undefined) return;
      t.addresses.delete(ip);
      if (this.#holder.get(ip) === id) this.#holder.delete(ip);
    }
    this.#dirty.add(id);
    if (!this.#scheduled) {
      this.#scheduled = true;
      queueMicrotask(() => this.#flush());
    }
  }

  #onPods(): void {
    const { pods } = this.#o;
    for (const [id, t] of this.#tracked) {
      if (t.pod === undefined) {
        if (t.addresses.size > 0) this.#dirty.add(id);
      } else if (!t.podGone && pods.isSynced && pods.get(t.pod.name, t.pod.namespace)?.metadata?.uid !== t.pod.uid) {
        // Deleted from the API before its endpoint (CNI DEL comes later): its object is being
        // collected, and writing it again would only race the garbage collector.
        t.podGone = true;
        this.#dirty.add(id);
      }
    }
    this.#flush();
  }

  #flush(): void {
    this.#scheduled = false;
    const ids = [...this.#dirty];
    this.#dirty.clear();
    for (const id of ids) this.#evaluate(id);
  }

  #evaluate(id: number): void {
    const t = this.#tracked.get(id);
    if (t === undefined) return;
    if (t.addresses.size === 0) {
      this.#tracked.delete(id);
      if (t.reported !== undefined) this.#emit({ type: 'delete', id });
      return;
    }
    if (t.pod === undefined) {
      const ep = this.#o.endpoints.get(id);
      const namespace = ep?.podNamespace;
      const name = ep?.podName;
      // Not a Kubernetes pod's endpoint (no K8S_POD_NAME): not published in crd mode.
      if (!namespace || !name) return;
      const meta = this.#o.pods.get(name, namespace)?.metadata;
      const uid = meta?.uid;
      // A terminating pod of the name is an earlier pod (a StatefulSet's, its deletion not yet
      // seen here), never the one a new endpoint was made for: wait for the pod that replaces it.
      if (uid === undefined || meta?.deletionTimestamp !== undefined) {
        this.#o.logger?.debug({ endpoint: id, pod: `${namespace}/${name}` }, 'endpoint waits for its pod in the cache');
        return;
      }
      t.pod = { namespace, name, uid };
    }
    if (t.podGone === true || !isPublishableIdentity(t.identity)) {
      if (t.reported !== undefined) {
        t.reported = undefined;
        this.#emit({ type: 'delete', id });
      }
      return;
    }
    const next: PublishedEndpoint = {
      id,
      podNamespace: t.pod.namespace,
      podName: t.pod.name,
      podUid: t.pod.uid,
      identity: t.identity,
      addresses: [...t.addresses.keys()].sort(),
    };
    const prev = t.reported;
    if (prev !== undefined && prev.identity === next.identity && prev.addresses.join() === next.addresses.join()) return;
    t.reported = next;
    this.#emit({ type: 'upsert', endpoint: next });
  }

  #emit(change: PublishedEndpointChange): void {
    for (const l of this.#listeners) {
      try {
        l(change);
      } catch (err) {
        this.#o.logger?.error({ err, change: change.type }, 'published endpoint listener threw');
      }
    }
  }
}
