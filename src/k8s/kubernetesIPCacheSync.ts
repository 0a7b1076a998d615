/**
 * The ipcache over the Kubernetes API (the `crd` cluster mode's counterpart
 * of src/ipcache/kvstoreSync.ts): this node's pod endpoints become
 * TendrilEndpoint objects, and every other node's objects become ipcache
 * entries of source `kvstore` (the same priority: both say what another node
 * holds; a separate source would only rename it), owner `node:<node>`.
 *
 * Publishing, per pod object (namespace/name), serialised per object and
 * retried with back-off until it lands or the endpoint is gone:
 * - a pod start is ONE create (owned by the Pod, labelled with this node);
 *   an update only when identity or addresses change; a delete per endpoint
 *   delete, with uid and resourceVersion preconditions, so an object another
 *   node (or a later pod of the name) rewrote meanwhile stays;
 * - an object already there (409, or seen by the informer) written by this
 *   node, or stale (its owner uid is not the pod's), is replaced under a
 *   resourceVersion precondition, or adopted without a write when it
 *   already says the same (an agent restart rewrites nothing);
 * - an object of ours deleted by someone else (GC racing a re-used pod name,
 *   the operator, kubectl) while the endpoint lives is created again.
 *
 * Following: an informer on every namespace's objects that caches only the
 * fields used (compactEndpoint). An endpoint enters the ipcache only while
 * its node is in the node registry view (a live Lease); it leaves when the
 * node does, and comes back with it. An address claimed by two objects (a
 * pod's address re-used by another pod before the first object is gone:
 * Cilium #19958) goes to the newest claim, and falls back to the other when
 * the newest goes: a late delete never removes the address's new owner.
 */
import { CustomObjectsApi, type KubeConfig, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node';
import { Backoff } from '../async/backoff.js';
import { KeyedSerializer } from '../async/keyedSerializer.js';
import { IpcacheSource, kvstoreOwner, type IPCache, type SyncStats } from '../ipcache/index.js';
import type { Logger } from '../logging/logger.js';
import { prefixContainsIp, tryParseIp, tryParsePrefix } from '../netip/index.js';
import { podCidrsOfFamily } from '../node/nodeRecord.js';
import type { NodeChange, NodeRecord, NodeRegistryView } from '../node/types.js';
import { K8sObjectConflictError, K8sSyncTimeoutError } from './errors.js';
import type { PublishedEndpointChange, PublishedEndpointSource } from './podEndpointFeed.js';
import { describeK8sError, httpStatusOf, ResourceInformer } from './resourceInformer.js';
import {
  canonicalIp,
  compactEndpoint,
  sameEndpoint,
  TENDRIL_ENDPOINT_GROUP,
  TENDRIL_ENDPOINT_NODE_LABEL,
  nodeLabelValue,
  TENDRIL_ENDPOINT_PATH,
  TENDRIL_ENDPOINT_PLURAL,
  TENDRIL_ENDPOINT_VERSION,
  tendrilEndpointObject,
  type CompactEndpoint,
  type PublishedEndpoint,
  type PublishingNode,
} from './tendrilEndpoint.js';
import { DEFAULT_RETRY, type RetryOptions } from './types.js';

export interface KubernetesIPCacheSyncOptions {
  kubeConfig: KubeConfig;
  ipcache: IPCache;
  nodeName: string;
  /** This node's IP: the tunnel endpoint other nodes use for its endpoints. */
  nodeIP: string;
  /** Its IPv6 InternalIP beside an IPv4 node IP (see KvstoreIPCacheSyncOptions.nodeIP6). */
  nodeIP6?: string;
  /** This node's pod endpoints (PodEndpointFeed). */
  endpoints: PublishedEndpointSource;
  /** Which nodes are alive: another node's endpoints are in the ipcache only while it is in the view. */
  nodes: NodeRegistryView;
  logger: Logger;
  retry?: RetryOptions;
  /** start() fails with K8sSyncTimeoutError when the first list takes longer (default 30 s). */
  syncTimeoutMs?: number;
  /** Objects per list request (default 500): a 50,000-object list is never one response held whole. */
  listPageSize?: number;
}

export interface KubernetesSyncStats extends SyncStats {
  /** Creates answered 409 and replaces or deletes whose precondition failed. */
  conflicts: number;
  /** Object versions seen that could not be used (a broken writer's): each logged and ignored. */
  unusable: number;
  /** Endpoints held back because an address lies outside their node's pod CIDRs (a writer claiming another's address). */
  outsidePodCidrs: number;
}

/**
 * Whether every address of an endpoint lies in its node's pod CIDRs of that
 * family. A node that publishes none of a family (delegated IPAM) cannot be
 * checked for it, and is believed. Without this, any object could put a pod
 * identity on another node's address (its InternalIP: traffic from that node
 * would pass as the pod) or on a pod of another node.
 */
function withinPodCidrs(addresses: readonly string[], node: NodeRecord): boolean {
  return addresses.every((a) => {
    const ip = tryParseIp(a);
    if (ip === undefined) return false;
    const cidrs = podCidrsOfFamily(node, ip.family);
    return cidrs.length === 0 || cidrs.some((c) => {
      const p = tryParsePrefix(c, { hostBits: 'mask' });
      return p !== undefined && prefixContainsIp(p, ip);
    });
  });
}

/** What the API holds of one of our objects, as we last wrote or adopted it. */
interface Written {
  uid: string;
  resourceVersion: string;
  ep: PublishedEndpoint;
}

/** Another node's endpoint. */
interface Remote {
  readonly key: string;
  readonly node: string;
  readonly identity: number;
  readonly addresses: readonly string[];
  readonly hostIP: string;
  /** In the ipcache (its node is alive). */
  installed: boolean;
}

const podKey = (namespace: string, name: string) => `${namespace}/${name}`;

/** The object would say the same for both (addresses are sorted). */
function samePublished(a: PublishedEndpoint, b: PublishedEndpoint): boolean {
  return a.id === b.id && a.podUid === b.podUid && a.identity === b.identity && a.addresses.length === b.addresses.length && a.addresses.every((x, i) => x === b.addresses[i]);
}

export class KubernetesIPCacheSync {
  readonly informer: ResourceInformer<CompactEndpoint>;
  readonly stats: KubernetesSyncStats = { writes: 0, deletes: 0, staleDeletesSkipped: 0, resyncs: 0, conflicts: 0, unusable: 0, outsidePodCidrs: 0 };
  readonly #o: KubernetesIPCacheSyncOptions;
  readonly #log: Logger;
  readonly #custom: CustomObjectsApi;
  readonly #self: PublishingNode;
  readonly #ipv6Underlay: boolean;
  readonly #retry: RetryOptions;
  readonly #serial = new KeyedSerializer();
  /** Pod key → this node's endpoints of the pod, the newest last (it is what the object says). */
  readonly #desired = new Map<string, PublishedEndpoint[]>();
  readonly #podOfEndpoint = new Map<number, string>();
  readonly #written = new Map<string, Written>();
  readonly #retryTimers = new Map<string, NodeJS.Timeout>();
  readonly #backoffs = new Map<string, Backoff>();
  readonly #remote = new Map<string, Remote>();
  readonly #byNode = new Map<string, Set<Remote>>();
  /** Address → the installed endpoints claiming it, the effective one last. */
  readonly #claims = new Map<string, Remote | Remote[]>();
  /** One string per namespace, node name and node IP (50,000 records name a few hundred nodes). */
  readonly #interned = new Map<string, string>();
  /** node → its ipcache owner (`node:<name>`), one string per node. */
  readonly #owners = new Map<string, string>();
  readonly #unsubscribe: Array<() => void> = [];
  #lists = 0;
  #started = false;
  #stopped = false;

  constructor(o: KubernetesIPCacheSyncOptions) {
    if (tryParseIp(o.nodeIP) === undefined) throw new TypeError(`node IP ${JSON.stringify(o.nodeIP)} is not an IP address`);
    if (o.nodeIP6 !== undefined && tryParseIp(o.nodeIP6)?.family !== 6) throw new TypeError(`IPv6 node IP ${JSON.stringify(o.nodeIP6)} is not an IPv6 address`);
    this.#o = o;
    this.#log = o.logger;
    this.#retry = o.retry ?? DEFAULT_RETRY;
    this.#self = { name: o.nodeName, nodeIP: canonicalIp(o.nodeIP)!, ...(o.nodeIP6 === undefined ? {} : { nodeIP6: canonicalIp(o.nodeIP6)! }) };
    this.#ipv6Underlay = tryParseIp(o.nodeIP)?.family === 6;
    this.#custom = o.kubeConfig.makeApiClient(CustomObjectsApi);
    this.informer = new ResourceInformer<CompactEndpoint>({
      resource: TENDRIL_ENDPOINT_PLURAL,
      kubeConfig: o.kubeConfig,
      path: TENDRIL_ENDPOINT_PATH,
      list: () => this.#listAll(),
      transform: (obj) => compactEndpoint(obj, { ownNode: o.nodeName, intern: (s) => this.#intern(s) }),
      logger: o.logger,
      ...(o.retry === undefined ? {} : { retry: o.retry }),
    });
    this.informer.on('add', (c) => this.#follow(c));
    this.informer.on('update', (c) => this.#follow(c));
    this.informer.on('delete', (c) => this.#unfollow(c));
  }

  #collection() {
    return { group: TENDRIL_ENDPOINT_GROUP, version: TENDRIL_ENDPOINT_VERSION, plural: TENDRIL_ENDPOINT_PLURAL };
  }

  /** Every namespace's objects, page by page; the first page's resourceVersion is the list's (the watch resumes there). */
  async #listAll(selector?: string): Promise<KubernetesListObject<KubernetesObject>> {
    if (selector === undefined) {
      this.#lists++;
      this.stats.resyncs = Math.max(0, this.#lists - 1);
    }
    const items: KubernetesObject[] = [];
    let resourceVersion: string | undefined;
    let cont: string | undefined;
    do {
      const page = (await this.#custom.listClusterCustomObject({
        ...this.#collection(),
        limit: this.#o.listPageSize ?? 500,
        ...(cont === undefined ? {} : { _continue: cont }),
        ...(selector === undefined ? {} : { labelSelector: selector }),
      })) as KubernetesListObject<KubernetesObject>;
      resourceVersion ??= page.metadata?.resourceVersion;
      for (const item of page.items) items.push(item);
      // Custom objects come back as wire JSON (`continue`), not the client's model (`_continue`).
      const meta = page.metadata as { continue?: string; _continue?: string } | undefined;
      cont = meta?.continue || meta?._continue || undefined;
    } while (cont !== undefined);
    return { apiVersion: 'v1', kind: 'List', metadata: { ...(resourceVersion === undefined ? {} : { resourceVersion }) }, items };
  }

  /** Lists every object, then publishes this node's endpoints (adopting objects that already say the same). */
  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    this.#unsubscribe.push(this.#o.nodes.subscribe((c) => this.#onNode(c)));
    this.informer.start();
    const timeoutMs = this.#o.syncTimeoutMs ?? 30_000;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new K8sSyncTimeoutError(timeoutMs, [TENDRIL_ENDPOINT_PLURAL])), timeoutMs);
    });
    try {
      await Promise.race([this.informer.synced, timeout]);
    } finally {
      clearTimeout(timer);
    }
    this.#unsubscribe.push(this.#o.endpoints.subscribe((c) => this.#onEndpoint(c)));
    for (const endpoint of this.#o.endpoints.list()) this.#onEndpoint({ type: 'upsert', endpoint });
  }

  /** Resolves when every queued write has landed (retries included). */
  async flush(): Promise<void> {
    // The feed reports ipcache changes after the current task (it gathers an endpoint's addresses).
    await new Promise((r) => setImmediate(r));
    for (;;) {
      await this.#serial.idle();
      if (this.#retryTimers.size === 0 || this.#stopped) return;
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    for (const u of this.#unsubscribe.splice(0)) u();
    for (const t of this.#retryTimers.values()) clearTimeout(t);
    this.#retryTimers.clear();
    await this.#serial.idle();
    await this.informer.stop();
  }

  // ---- publishing ----------------------------------------------------------

  #onEndpoint(change: PublishedEndpointChange): void {
    if (this.#stopped) return;
    if (change.type === 'upsert') {
      const ep = change.endpoint;
      const key = podKey(ep.podNamespace, ep.podName);
      const was = this.#podOfEndpoint.get(ep.id);
      if (was !== undefined && was !== key) this.#dropDesired(ep.id, was);
      const list = (this.#desired.get(key) ?? []).filter((e) => e.id !== ep.id);
      list.push(ep);
      this.#desired.set(key, list);
      this.#podOfEndpoint.set(ep.id, key);
      this.#kick(key);
    } else {
      const key = this.#podOfEndpoint.get(change.id);
      if (key !== undefined) this.#dropDesired(change.id, key);
    }
  }

  #dropDesired(id: number, key: string): void {
    this.#podOfEndpoint.delete(id);
    const list = (this.#desired.get(key) ?? []).filter((e) => e.id !== id);
    if (list.length === 0) this.#desired.delete(key);
    else this.#desired.set(key, list);
    this.#kick(key);
  }

  #kick(key: string): void {
    if (this.#stopped) return;
    void this.#serial.run(key, () => this.#reconcile(key)).then(
      () => this.#backoffs.delete(key),
      (err: unknown) => {
        this.#log.warn({ pod: key, error: describeK8sError(err) }, 'TendrilEndpoint write failed; retrying');
        this.#scheduleRetry(key);
      },
    );
  }

  #scheduleRetry(key: string): void {
    if (this.#stopped || this.#retryTimers.has(key)) return;
    let backoff = this.#backoffs.get(key);
    if (backoff === undefined) this.#backoffs.set(key, (backoff = new Backoff(this.#retry)));
    const timer = setTimeout(() => {
      this.#retryTimers.delete(key);
      this.#kick(key);
    }, backoff.next());
    this.#retryTimers.set(key, timer);
  }

  async #reconcile(key: string): Promise<void> {
    if (this.#stopped) return;
    const want = this.#desired.get(key)?.at(-1);
    const have = this.#written.get(key);
    if (want === undefined) {
      if (have !== undefined) await this.#delete(key, have);
      return;
    }
    if (have !== undefined && samePublished(have.ep, want)) return;
    await this.#put(key, want, have);
  }

  /** Creates or replaces the pod's object so it says `want`. */
  async #put(key: string, want: PublishedEndpoint, have: Written | undefined): Promise<void> {
    // What we believe is there: our last write, else what the informer saw (an earlier life's object, another node's).
    let current: CompactEndpoint | undefined =
      have !== undefined ? { metadata: { name: want.podName, namespace: want.podNamespace, uid: have.uid, resourceVersion: have.resourceVersion }, podUid: have.ep.podUid } : this.informer.get(want.podName, want.podNamespace);
    // The informer keeps no uids of other nodes' objects: whose pod it names is read when it matters.
    if (current !== undefined && current.metadata.uid === undefined) current = await this.#read(want);
    for (let attempt = 0; attempt < 4; attempt++) {
      if (current === undefined) {
        try {
          const created = (await this.#custom.createNamespacedCustomObject({ ...this.#collection(), namespace: want.podNamespace, body: tendrilEndpointObject(want, this.#self) })) as KubernetesObject;
          this.stats.writes++;
          this.#remember(key, created, want);
          return;
        } catch (err) {
          if (httpStatusOf(err) !== 409) throw err;
          this.stats.conflicts++;
          current = await this.#read(want);
          continue;
        }
      }
      if (!this.#mayReplace(current, want)) {
        throw new K8sObjectConflictError(`TendrilEndpoint ${key} is held by node ${String(current.spec?.node)} for the same pod (uid ${want.podUid})`);
      }
      if (current.spec !== undefined && current.metadata.uid !== undefined && current.metadata.resourceVersion !== undefined && sameEndpoint(current, want, this.#self)) {
        this.#written.set(key, { uid: current.metadata.uid, resourceVersion: current.metadata.resourceVersion, ep: want });
        return;
      }
      try {
        const replaced = (await this.#custom.replaceNamespacedCustomObject({
          ...this.#collection(),
          namespace: want.podNamespace,
          name: want.podName,
          body: tendrilEndpointObject(want, this.#self, current.metadata.resourceVersion),
        })) as KubernetesObject;
        this.stats.writes++;
        this.#remember(key, replaced, want);
        return;
      } catch (err) {
        const status = httpStatusOf(err);
        if (status === 404) {
          current = undefined;
          continue;
        }
        if (status !== 409) throw err;
        this.stats.conflicts++;
        current = await this.#read(want);
      }
    }
    throw new K8sObjectConflictError(`TendrilEndpoint ${key} kept changing under this node's writes`);
  }

  /** Ours (any life of this node), or stale: owned by another pod of the name, or unreadable. */
  #mayReplace(c: CompactEndpoint, want: PublishedEndpoint): boolean {
    return c.spec === undefined || c.spec.node === this.#self.name || c.podUid !== want.podUid;
  }

  async #read(want: PublishedEndpoint): Promise<CompactEndpoint | undefined> {
    try {
      return compactEndpoint((await this.#custom.getNamespacedCustomObject({ ...this.#collection(), namespace: want.podNamespace, name: want.podName })) as KubernetesObject);
    } catch (err) {
      if (httpStatusOf(err) === 404) return undefined;
      throw err;
    }
  }

  #remember(key: string, obj: KubernetesObject, ep: PublishedEndpoint): void {
    const uid = obj.metadata?.uid;
    const resourceVersion = obj.metadata?.resourceVersion;
    if (uid === undefined || resourceVersion === undefined) throw new TypeError(`the API server answered a TendrilEndpoint write for ${key} without uid or resourceVersion`);
    this.#written.set(key, { uid, resourceVersion, ep });
  }

  async #delete(key: string, have: Written): Promise<void> {
    const { podNamespace: namespace, podName: name } = have.ep;
    let preconditions = { uid: have.uid, resourceVersion: have.resourceVersion };
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        await this.#custom.deleteNamespacedCustomObject({ ...this.#collection(), namespace, name, body: { preconditions } });
        this.stats.deletes++;
        break;
      } catch (err) {
        const status = httpStatusOf(err);
        if (status === 404) break;
        if (status !== 409) throw err;
        this.stats.conflicts++;
        // Someone wrote it since (a label added by hand): still ours for this endpoint → delete that version.
        const now = await this.#read(have.ep);
        if (now === undefined) break;
        const ours = now.spec?.node === this.#self.name && now.spec.endpointID === have.ep.id && now.podUid === have.ep.podUid;
        if (!ours || now.metadata.uid === undefined || now.metadata.resourceVersion === undefined) {
          // Another node or a later pod of the name holds it now: not ours to delete.
          this.stats.staleDeletesSkipped++;
          break;
        }
        preconditions = { uid: now.metadata.uid, resourceVersion: now.metadata.resourceVersion };
      }
    }
    this.#written.delete(key);
  }

  /**
   * Deletes the objects labelled with this node that no current endpoint
   * publishes: an earlier life's, for pods deleted while the agent was down
   * (their pods' GC takes them too, but a pod may outlive its endpoint).
   * The agent calls it once its restore is done; an endpoint whose pod the
   * feed is still waiting for keeps its object. Each delete has uid and
   * resourceVersion preconditions, so an object re-written meanwhile stays.
   */
  async pruneStale(): Promise<number> {
    await this.flush();
    const list = await this.#listAll(`${TENDRIL_ENDPOINT_NODE_LABEL}=${nodeLabelValue(this.#self.name)}`);
    // An endpoint still waiting for its pod in the cache will publish its object: not stale.
    const waiting = this.#o.endpoints.waiting?.() ?? new Set<string>();
    let pruned = 0;
    for (const item of list.items) {
      const c = compactEndpoint(item);
      const key = podKey(c.metadata.namespace, c.metadata.name);
      if (this.#desired.has(key) || this.#written.has(key) || waiting.has(key)) continue;
      if (c.spec !== undefined && c.spec.node !== this.#self.name) continue;
      try {
        await this.#custom.deleteNamespacedCustomObject({
          ...this.#collection(),
          namespace: c.metadata.namespace,
          name: c.metadata.name,
          body: { preconditions: { ...(c.metadata.uid === undefined ? {} : { uid: c.metadata.uid }), ...(c.metadata.resourceVersion === undefined ? {} : { resourceVersion: c.metadata.resourceVersion }) } },
        });
        this.stats.deletes++;
        pruned++;
      } catch (err) {
        const status = httpStatusOf(err);
        if (status === 409) this.stats.conflicts++;
        else if (status !== 404) throw err;
      }
    }
    return pruned;
  }

  // ---- following -----------------------------------------------------------

  #intern(s: string): string {
    const had = this.#interned.get(s);
    if (had !== undefined) return had;
    this.#interned.set(s, s);
    return s;
  }

  #ownerOf(node: string): string {
    let owner = this.#owners.get(node);
    if (owner === undefined) this.#owners.set(node, (owner = kvstoreOwner(node)));
    return owner;
  }

  #follow(c: CompactEndpoint): void {
    const key = podKey(c.metadata.namespace, c.metadata.name);
    const spec = c.spec;
    if (spec === undefined) {
      this.stats.unusable++;
      this.informer.noteError(`TendrilEndpoint ${key}: ${c.problem ?? 'unusable'}`);
      this.#log.error({ pod: key, reason: c.problem }, 'TendrilEndpoint unusable; ignored');
      this.#forget(key);
      return;
    }
    if (spec.node === this.#self.name) {
      // Our own object: the local entries are authoritative.
      this.#forget(key);
      return;
    }
    const hostIP = spec.nodeIP6 !== undefined && this.#ipv6Underlay ? spec.nodeIP6 : spec.nodeIP;
    const old = this.#remote.get(key);
    if (
      old !== undefined &&
      old.node === spec.node &&
      old.identity === spec.identity &&
      old.hostIP === hostIP &&
      old.addresses.length === spec.addresses.length &&
      old.addresses.every((a, i) => a === spec.addresses[i])
    ) {
      return;
    }
    this.#forget(key);
    const node = spec.node;
    const rec: Remote = { key, node, identity: spec.identity, addresses: spec.addresses, hostIP, installed: false };
    this.#remote.set(key, rec);
    let set = this.#byNode.get(node);
    if (set === undefined) this.#byNode.set(node, (set = new Set()));
    set.add(rec);
    this.#installIfAllowed(rec, true);
  }

  /** Installs an endpoint while its node is listed and its addresses are the node's to give; else takes it out. */
  #installIfAllowed(rec: Remote, fresh: boolean): void {
    const node = this.#o.nodes.get(rec.node);
    if (node === undefined) return this.#uninstall(rec);
    if (withinPodCidrs(rec.addresses, node)) return this.#install(rec);
    if (fresh || rec.installed) {
      this.stats.outsidePodCidrs++;
      this.#log.error({ pod: rec.key, node: rec.node, addresses: rec.addresses, podCidrs: node.podCidrs }, 'TendrilEndpoint claims addresses outside its node\'s pod CIDRs; ignored');
    }
    this.#uninstall(rec);
  }

  #unfollow(c: CompactEndpoint): void {
    const key = podKey(c.metadata.namespace, c.metadata.name);
    this.#forget(key);
    // One of ours deleted by someone else while its endpoint lives: write it again.
    const have = this.#written.get(key);
    if (have !== undefined && (c.metadata.uid === undefined || c.metadata.uid === have.uid)) {
      this.#written.delete(key);
      if (this.#desired.has(key)) {
        // After a back-off step, not at once: the pod's own deletion (the GC took its object)
        // reaches the feed through another watch, and then there is nothing to write.
        this.#log.info({ pod: key }, 'TendrilEndpoint of a live endpoint deleted by another writer; writing it again');
        this.#scheduleRetry(key);
      }
    }
  }

  #forget(key: string): void {
    const rec = this.#remote.get(key);
    if (rec === undefined) return;
    this.#remote.delete(key);
    const set = this.#byNode.get(rec.node);
    set?.delete(rec);
    if (set?.size === 0) this.#byNode.delete(rec.node);
    this.#uninstall(rec);
  }

  #onNode(change: NodeChange): void {
    const recs = this.#byNode.get(change.node.name);
    if (recs === undefined) return;
    if (change.type === 'upsert') {
      // Pod CIDRs may have changed: each endpoint is judged again.
      for (const rec of recs) this.#installIfAllowed(rec, false);
    } else {
      for (const rec of recs) this.#uninstall(rec);
    }
  }

  #install(rec: Remote): void {
    if (rec.installed) return;
    rec.installed = true;
    for (const ip of rec.addresses) {
      const claims = this.#claims.get(ip);
      if (claims === undefined) this.#claims.set(ip, rec);
      else if (Array.isArray(claims)) claims.push(rec);
      else this.#claims.set(ip, [claims, rec]);
      this.#upsertEntry(ip, rec);
    }
  }

  #uninstall(rec: Remote): void {
    if (!rec.installed) return;
    rec.installed = false;
    for (const ip of rec.addresses) {
      const claims = this.#claims.get(ip);
      if (claims === undefined) continue;
      if (!Array.isArray(claims)) {
        if (claims !== rec) continue;
        this.#claims.delete(ip);
        this.#o.ipcache.delete(ip, { source: IpcacheSource.Kvstore, owner: this.#ownerOf(rec.node) });
        continue;
      }
      const i = claims.indexOf(rec);
      if (i < 0) continue;
      const wasEffective = i === claims.length - 1;
      claims.splice(i, 1);
      const next = claims.at(-1)!;
      if (claims.length === 1) this.#claims.set(ip, next);
      // The older claim takes the address back (the newest one's object went first).
      if (wasEffective) this.#upsertEntry(ip, next);
    }
  }

  #upsertEntry(ip: string, rec: Remote): void {
    try {
      this.#o.ipcache.upsert(ip, { source: IpcacheSource.Kvstore, owner: this.#ownerOf(rec.node), identity: rec.identity, hostIP: rec.hostIP });
    } catch (err) {
      // Validated on the way in; an ipcache refusal is a bug worth a log line, not a stopped watch.
      this.#log.error({ err, pod: rec.key, ip }, 'ipcache refused a TendrilEndpoint address');
    }
  }
}
