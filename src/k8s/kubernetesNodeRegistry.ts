/**
 * The cluster's nodes in the Kubernetes API (the `crd` mode's node registry):
 * each node's record is its TendrilNode object (tendrilNode.ts), its liveness
 * its coordination.k8s.io Lease (nodeLeases.ts). A node is listed while its
 * object exists, decodes, and its Lease is live; a Lease that runs out is a
 * 'delete' for subscribers, a renewal after that an 'upsert'. So a node that
 * dies without a word leaves every other node's view one lease duration
 * later, as in the kvstore registry, though its object stays (it goes with
 * the Node object, which owns it).
 *
 * This node writes its own object's agent fields with a JSON merge patch, so
 * spec.ipam (the operator's cluster-pool CIDRs) is never touched and no
 * resourceVersion precondition is needed (no one else writes those fields);
 * a patch answered 404 creates the object, owned by the Node object when it
 * exists (its Lease too). The object is written again when the informer
 * sees it deleted.
 *
 * Cluster-pool IPAM needs its CIDRs before the agent can say which pod CIDRs
 * it uses: ensureOwnObject(record) creates the object (pod CIDRs still
 * empty) without the Lease, so no node routes to it yet; the agent then
 * waits with waitForAllocatedPodCidrs(), starts IPAM, and calls start() with
 * the full record, which writes it and starts the Lease.
 *
 * revisionOf() is the object's metadata.resourceVersion read as a number.
 * Kubernetes calls it opaque; kube-apiserver over etcd and the fake API
 * server give integers that grow with every write. When one does not parse,
 * a local counter stands in: it grows with each change seen, but is not
 * comparable with another node's.
 */
import {
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  type V1OwnerReference,
} from '@kubernetes/client-node';
import { Backoff } from '../async/backoff.js';
import { Serializer } from '../async/keyedSerializer.js';
import type { Logger } from '../logging/logger.js';
import { NodeError, NodeErrorCode, NodeRecordError } from '../node/errors.js';
import { normalizeNodeRecord } from '../node/nodeRecord.js';
import { KnownNodes, type KnownNode } from '../node/knownNodes.js';
import type { NodeChange, NodeRecord, NodeRegistryService } from '../node/types.js';
import { K8sPodCidrTimeoutError, K8sStoppedError, K8sSyncTimeoutError } from './errors.js';
import { NodeLeaseFollower, NodeLeaseWriter } from './nodeLeases.js';
import { describeK8sError, httpStatusOf, ResourceInformer } from './resourceInformer.js';
import {
  allocatedPodCidrsOfObject,
  nodeRecordOfObject,
  TENDRIL_NODE_GROUP,
  TENDRIL_NODE_PATH,
  TENDRIL_NODE_PLURAL,
  TENDRIL_NODE_VERSION,
  tendrilNodeObject,
  tendrilNodeSpecPatch,
} from './tendrilNode.js';
import type { RetryOptions } from './types.js';

export interface KubernetesNodeRegistryOptions {
  kubeConfig: KubeConfig;
  nodeName: string;
  /** Where the node Leases live (the agent's --k8s-namespace). */
  namespace?: string;
  /** The Lease's leaseDurationSeconds (the agent's --lease-ttl); renewed every third of it. */
  leaseTtlSeconds?: number;
  logger: Logger;
  /** start() fails with K8sSyncTimeoutError when the first list takes longer (default 30 s). */
  syncTimeoutMs?: number;
  /** Back-off of the informers' restarts, the Lease's renewals and the own object's rewrites. */
  retry?: RetryOptions;
}

// A Kubernetes object name (DNS subdomain): TendrilNode and Lease names are the node's name.
const OBJECT_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const MAX_LEASE_NAME = 253;


export class KubernetesNodeRegistry implements NodeRegistryService {
  readonly nodeInformer: ResourceInformer<KubernetesObject>;
  readonly leases: NodeLeaseFollower;
  readonly #leaseWriter: NodeLeaseWriter;
  readonly #custom: CustomObjectsApi;
  readonly #core: CoreV1Api;
  readonly #nodeName: string;
  readonly #log: Logger;
  readonly #syncTimeoutMs: number;
  readonly #retry: Backoff;
  /** Decoded TendrilNode objects, by node. */
  readonly #objects = new Map<string, KnownNode>();
  /** What subscribers were told: nodes with an object and a live Lease. */
  readonly #visible: KnownNodes;
  readonly #ownObjectListeners = new Set<() => void>();
  readonly #writes = new Serializer();
  #state: 'new' | 'running' | 'stopped' = 'new';
  #following = false;
  #listed = false;
  #own: NodeRecord | undefined;
  #ownText = '';
  #ownRevision = 0;
  #rewriteTimer: NodeJS.Timeout | undefined;
  #revisionCounter = 0;
  #warnedOpaqueRevision = false;
  /** Object writes (patches and creates) this node made. */
  writes = 0;

  constructor(o: KubernetesNodeRegistryOptions) {
    if (!OBJECT_NAME.test(o.nodeName) || o.nodeName.length > MAX_LEASE_NAME - 'tendril-node-'.length) {
      throw new NodeRecordError(`node name ${JSON.stringify(o.nodeName)} cannot name a TendrilNode and its Lease (a lowercase DNS subdomain)`);
    }
    const namespace = o.namespace ?? 'kube-system';
    const ttl = o.leaseTtlSeconds ?? 15;
    this.#nodeName = o.nodeName;
    this.#log = o.logger;
    this.#visible = new KnownNodes(o.nodeName, o.logger);
    this.#syncTimeoutMs = o.syncTimeoutMs ?? 30_000;
    this.#retry = new Backoff(o.retry ?? { initialMs: 500, maxMs: Math.max(1000, (ttl * 1000) / 3) });
    this.#custom = o.kubeConfig.makeApiClient(CustomObjectsApi);
    this.#core = o.kubeConfig.makeApiClient(CoreV1Api);
    const retry = o.retry === undefined ? {} : { retry: o.retry };
    this.nodeInformer = new ResourceInformer<KubernetesObject>({
      resource: TENDRIL_NODE_PLURAL,
      kubeConfig: o.kubeConfig,
      path: TENDRIL_NODE_PATH,
      list: () => this.#custom.listClusterCustomObject(this.#collection()) as Promise<KubernetesListObject<KubernetesObject>>,
      logger: o.logger,
      ...retry,
    });
    this.nodeInformer.on('add', (obj) => this.#upsertObject(obj));
    this.nodeInformer.on('update', (obj) => this.#upsertObject(obj));
    this.nodeInformer.on('delete', (obj) => this.#deleteObject(obj));
    this.leases = new NodeLeaseFollower({ kubeConfig: o.kubeConfig, namespace, logger: o.logger, ...retry, onChange: (node) => this.#leaseChanged(node) });
    this.#leaseWriter = new NodeLeaseWriter({
      kubeConfig: o.kubeConfig,
      namespace,
      nodeName: o.nodeName,
      ttlSeconds: ttl,
      logger: o.logger,
      ...retry,
      owner: () => this.#nodeOwner(),
    });
  }

  get nodeName(): string {
    return this.#nodeName;
  }

  /** Lease writes (creates and renewals) this node made. */
  get leaseWrites(): number {
    return this.#leaseWriter.writes;
  }

  #collection() {
    return { group: TENDRIL_NODE_GROUP, version: TENDRIL_NODE_VERSION, plural: TENDRIL_NODE_PLURAL };
  }

  /**
   * Writes this node's TendrilNode (a record whose pod CIDRs may still be
   * empty) and follows it, without the Lease: other nodes do not list the
   * node yet. For cluster-pool IPAM, before waitForAllocatedPodCidrs().
   */
  async ensureOwnObject(own: NodeRecord): Promise<void> {
    if (this.#state !== 'new') throw new NodeError(NodeErrorCode.NOT_RUNNING, `node registry of ${this.#nodeName} was started before`);
    this.#setOwn(own);
    await this.#writes.run(() => this.#writeOwn());
    this.#follow();
  }

  /** Writes `own`, starts the node's Lease, lists and follows; resolves after the first listing. */
  async start(own: NodeRecord): Promise<void> {
    if (this.#state !== 'new') throw new NodeError(NodeErrorCode.NOT_RUNNING, `node registry of ${this.#nodeName} was started before`);
    this.#setOwn(own);
    this.#state = 'running';
    try {
      // Object and Lease first, so this node is in its own first listing as the others will see it.
      await this.#writes.run(() => this.#writeOwn());
      await this.#leaseWriter.start();
      this.#follow();
      await this.#synced();
      this.#listed = true;
      for (const name of new Set([...this.#objects.keys(), ...this.#visible.nodes.keys()])) this.#refresh(name, false);
      if (!this.#objects.has(this.#nodeName)) this.#rewrite('own object missing from the listing');
    } catch (err) {
      await this.stop().catch(() => undefined);
      throw err;
    }
  }

  /**
   * Lists and follows the TendrilNodes and Leases without writing anything
   * (a reader of the cluster's nodes: the relay); resolves after the first listing.
   */
  async follow(): Promise<void> {
    if (this.#state !== 'new') throw new NodeError(NodeErrorCode.NOT_RUNNING, `node registry of ${this.#nodeName} was started before`);
    this.#state = 'running';
    try {
      this.#follow();
      await this.#synced();
      this.#listed = true;
      for (const name of new Set([...this.#objects.keys(), ...this.#visible.nodes.keys()])) this.#refresh(name, false);
    } catch (err) {
      await this.stop().catch(() => undefined);
      throw err;
    }
  }

  async update(own: NodeRecord): Promise<void> {
    if (this.#state !== 'running') throw new NodeError(NodeErrorCode.NOT_RUNNING, `node registry of ${this.#nodeName} is not running`);
    const before = this.#ownText;
    this.#setOwn(own);
    if (this.#ownText === before) return;
    await this.#writes.run(() => this.#writeOwn());
  }

  /** Stops renewing and following. The object and the Lease stay: a restart within the lease duration keeps the node listed. */
  async stop(): Promise<void> {
    this.#state = 'stopped';
    clearTimeout(this.#rewriteTimer);
    this.#rewriteTimer = undefined;
    for (const l of [...this.#ownObjectListeners]) l();
    await this.#leaseWriter.stop();
    await Promise.all([this.nodeInformer.stop(), this.leases.stop()]);
    await this.#writes.idle();
  }

  list(): NodeRecord[] {
    return this.#visible.list(this.#ownIfRunning());
  }

  get(name: string): NodeRecord | undefined {
    return this.#visible.get(name, this.#ownIfRunning());
  }

  revisionOf(name: string): number | undefined {
    return this.#visible.revisionOf(name, this.#ownRevision);
  }

  subscribe(listener: (change: NodeChange) => void): () => void {
    return this.#visible.subscribe(listener);
  }

  #ownIfRunning(): NodeRecord | undefined {
    return this.#state === 'running' ? this.#own : undefined;
  }

  /** spec.ipam.podCIDRs of this node's object as last seen: the cluster-pool CIDRs the operator handed it ([] before). */
  allocatedPodCidrs(): string[] {
    const obj = this.nodeInformer.get(this.#nodeName);
    if (obj === undefined) return [];
    const cidrs = allocatedPodCidrsOfObject(obj);
    if (typeof cidrs === 'string') {
      this.#log.error({ node: this.#nodeName, reason: cidrs }, 'unusable spec.ipam in this node\'s TendrilNode; ignored');
      return [];
    }
    return cidrs;
  }

  /** Resolves with the allocated CIDRs once there are some; K8sPodCidrTimeoutError after timeoutMs. Needs ensureOwnObject() or start() first. */
  async waitForAllocatedPodCidrs(timeoutMs: number): Promise<string[]> {
    if (!this.#following || this.#state === 'stopped') throw new NodeError(NodeErrorCode.NOT_RUNNING, `node registry of ${this.#nodeName} does not follow its TendrilNode yet`);
    const now = this.allocatedPodCidrs();
    if (now.length > 0) return now;
    return new Promise<string[]>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        this.#ownObjectListeners.delete(check);
      };
      const check = () => {
        if (this.#state === 'stopped') {
          done();
          reject(new K8sStoppedError('the TendrilNode\'s pod CIDRs'));
          return;
        }
        const cidrs = this.allocatedPodCidrs();
        if (cidrs.length === 0) return;
        done();
        resolve(cidrs);
      };
      const timer = setTimeout(() => {
        done();
        reject(new K8sPodCidrTimeoutError(this.#nodeName, timeoutMs));
      }, timeoutMs);
      this.#ownObjectListeners.add(check);
    });
  }

  // ---- following ---------------------------------------------------------------

  #follow(): void {
    if (this.#following) return;
    this.#following = true;
    this.nodeInformer.start();
    this.leases.start();
  }

  async #synced(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const pending = [this.nodeInformer, this.leases.informer].filter((i) => !i.isSynced).map((i) => i.resource);
        reject(new K8sSyncTimeoutError(this.#syncTimeoutMs, pending));
      }, this.#syncTimeoutMs);
    });
    try {
      await Promise.race([Promise.all([this.nodeInformer.synced, this.leases.synced]), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  #revision(obj: KubernetesObject): number {
    const rv = obj.metadata?.resourceVersion;
    if (rv !== undefined && /^[0-9]{1,15}$/.test(rv)) return Number(rv);
    if (!this.#warnedOpaqueRevision) {
      this.#warnedOpaqueRevision = true;
      this.#log.warn({ resourceVersion: rv }, 'TendrilNode resourceVersion is not an integer; node revisions are counted locally');
    }
    return ++this.#revisionCounter;
  }

  #upsertObject(obj: KubernetesObject): void {
    const name = obj.metadata?.name ?? '';
    if (name === this.#nodeName) for (const l of [...this.#ownObjectListeners]) l();
    const record = nodeRecordOfObject(obj);
    if (typeof record === 'string') {
      this.#log.error({ node: name, reason: record }, 'unusable TendrilNode; ignored');
      this.nodeInformer.noteError(`TendrilNode ${name}: ${record}`);
      this.#objects.delete(name);
      this.#refresh(name, true);
      return;
    }
    const known: KnownNode = { record, text: JSON.stringify(record), revision: this.#revision(obj) };
    this.#objects.set(name, known);
    if (name === this.#nodeName && this.#state === 'running' && known.text !== this.#ownText && known.revision > this.#ownRevision) {
      this.#log.warn({ node: name, revision: known.revision }, 'another writer changed this node\'s TendrilNode (two agents with one node name?)');
    }
    this.#refresh(name, true);
  }

  #deleteObject(obj: KubernetesObject): void {
    const name = obj.metadata?.name ?? '';
    this.#objects.delete(name);
    this.#refresh(name, true);
    // Deleted by hand or collected with its Node: a live node puts it back.
    if (name === this.#nodeName) this.#rewrite('own TendrilNode deleted');
  }

  #leaseChanged(node: string): void {
    // Our own Lease deleted by hand (or run out while the API was away): renew at once.
    if (node === this.#nodeName && !this.leases.isAlive(node)) this.#leaseWriter.renewSoon();
    this.#refresh(node, true);
  }

  /** Brings the node's listed state in line with its object and Lease; tells subscribers after the first listing. */
  #refresh(name: string, emit: boolean): void {
    const obj = this.#objects.get(name);
    const alive = this.leases.isAlive(name) || (name === this.#nodeName && this.#state === 'running' && this.#own !== undefined);
    const next = obj !== undefined && alive ? obj : undefined;
    const prev = this.#visible.nodes.get(name);
    if (next === undefined) {
      if (prev === undefined) return;
      this.#visible.nodes.delete(name);
      if (emit && this.#listed) this.#visible.emit({ type: 'delete', node: prev.record });
      return;
    }
    this.#visible.nodes.set(name, next);
    if (!emit || !this.#listed) return;
    if (prev === undefined) this.#visible.emit({ type: 'upsert', node: next.record });
    else if (prev.text !== next.text) this.#visible.emit({ type: 'upsert', node: next.record, previous: prev.record });
  }

  // ---- own object ----------------------------------------------------------------

  #setOwn(own: NodeRecord): void {
    if (own.name !== this.#nodeName) throw new NodeRecordError(`node record names ${JSON.stringify(own.name)}, but this node is ${JSON.stringify(this.#nodeName)}`);
    const record = normalizeNodeRecord(own); // throws NodeRecordError for a record others could not decode
    this.#own = record;
    this.#ownText = JSON.stringify(record);
  }

  /** The Node object as owner, when it exists (so deleting the Node deletes the TendrilNode). */
  async #nodeOwner(): Promise<V1OwnerReference | undefined> {
    try {
      const node = await this.#core.readNode({ name: this.#nodeName });
      const uid = node.metadata?.uid;
      return uid === undefined ? undefined : { apiVersion: 'v1', kind: 'Node', name: this.#nodeName, uid };
    } catch (err) {
      if (httpStatusOf(err) === 404) return undefined;
      throw err;
    }
  }

  /** Patches the agent's fields of the own object (spec.ipam untouched); creates it when missing. */
  async #writeOwn(): Promise<void> {
    if (this.#state === 'stopped' || this.#own === undefined) return;
    const record = this.#own;
    const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
    let lost: unknown;
    for (let attempt = 0; attempt < 3; attempt++) {
      let written: KubernetesObject;
      try {
        this.writes++;
        written = (await this.#custom.patchClusterCustomObject({ ...this.#collection(), name: this.#nodeName, body: tendrilNodeSpecPatch(record) }, merge)) as KubernetesObject;
      } catch (err) {
        if (httpStatusOf(err) !== 404) throw err;
        const owner = await this.#nodeOwner();
        try {
          this.writes++;
          written = (await this.#custom.createClusterCustomObject({ ...this.#collection(), body: tendrilNodeObject(record, owner) })) as KubernetesObject;
        } catch (createErr) {
          // Created meanwhile (a restarted agent's old write, the operator): patch it.
          if (httpStatusOf(createErr) !== 409) throw createErr;
          lost = createErr;
          continue;
        }
      }
      this.#ownRevision = Math.max(this.#ownRevision, this.#revision(written));
      this.#retry.reset();
      this.#log.debug({ node: this.#nodeName, revision: this.#ownRevision }, 'TendrilNode written');
      return;
    }
    // Deleted and created again under us three times over: someone else writes this node's object.
    throw lost;
  }

  /** Background re-write; a failure is retried with back-off while running. */
  #rewrite(why: string): void {
    // A reader (follow()) has no object of its own to write.
    if (this.#state !== 'running' || this.#rewriteTimer !== undefined || this.#own === undefined) return;
    this.#log.info({ node: this.#nodeName, why }, 'writing the TendrilNode again');
    this.#writes
      .run(() => this.#writeOwn())
      .catch((err: unknown) => {
        if (this.#state !== 'running') return;
        const delay = this.#retry.next();
        this.#log.error({ node: this.#nodeName, why, error: describeK8sError(err), retryInMs: delay }, 'cannot write the TendrilNode again; retrying');
        this.#rewriteTimer = setTimeout(() => {
          this.#rewriteTimer = undefined;
          this.#rewrite(why);
        }, delay);
      });
  }
}
