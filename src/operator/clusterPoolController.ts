/**
 * Cluster-pool CIDR allocation: every TendrilNode lacking a per-node CIDR of
 * a configured family in spec.ipam.podCIDRs gets one, by a JSON merge patch
 * of spec.ipam alone carrying the resourceVersion it was judged at (409: the
 * node is read again and judged again). At start (each time this operator
 * becomes the leader) the bookkeeping is rebuilt from the objects; a deleted
 * node's CIDRs are free again; a CIDR a node holds outside the pools is
 * logged and left; a full pool is logged and counted, and the node waits
 * until a CIDR comes free (for every missing family at once: a node is never
 * handed one family while another it needs is exhausted).
 *
 * One reconcile runs at a time (informer events only ask for another), so
 * the bookkeeping is never read half-updated.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import type { Logger } from '../logging/logger.js';
import { describeK8sError, httpStatusOf, type ResourceInformer } from '../k8s/resourceInformer.js';
import { sortCidrs } from '../ipam/cidr.js';
import { CidrPool, type Family, type ForeignCidr } from './cidrPool.js';
import type { OperatorApi } from './operatorApi.js';
import type { OperatorMetrics } from './operatorMetrics.js';
import { readTendrilNode, type OperatorNodeView } from './tendrilObjectViews.js';

export interface ClusterPoolControllerOptions {
  api: OperatorApi;
  nodes: ResourceInformer<KubernetesObject>;
  pool: CidrPool;
  logger: Logger;
  metrics: OperatorMetrics;
  /** Patch attempts per node and pass when each meets a conflict (default 5). */
  maxConflicts?: number;
}

const familyOf = (cidr: string): Family => (cidr.includes(':') ? 6 : 4);

export class ClusterPoolController {
  readonly #o: ClusterPoolControllerOptions;
  readonly #pool: CidrPool;
  readonly #log: Logger;
  /**
   * spec.ipam.podCIDRs known to be on the server that the cache may not show
   * yet: what the fresh list at start said, and what our own patches wrote.
   * Only the operator writes spec.ipam, so once this leader has listed, a
   * cached node without it is either new or behind on a write we know of;
   * it must not look bare (and get a second CIDR) meanwhile. Node → {uid, podCIDRs}.
   */
  readonly #known = new Map<string, { uid: string; cidrs: string[] }>();
  /** Nodes waiting for a full pool, by family (counted once per wait). */
  readonly #waiting = new Set<string>();
  readonly #foreignLogged = new Set<string>();
  /** The fresh list at start went through (until then nothing is handed out). */
  #listed = false;
  #running: Promise<void> | undefined;
  #again = false;
  #stopped = false;
  #unsubscribe: (() => void) | undefined;
  patches = 0;

  constructor(o: ClusterPoolControllerOptions) {
    this.#o = o;
    this.#pool = o.pool;
    this.#log = o.logger;
  }

  /**
   * Rebuilds the bookkeeping from the TendrilNodes as the server has them now
   * (a fresh list: this replica's cache may not yet show the previous
   * leader's last patches), hands out what is missing, and follows node
   * changes from then on. A failed list is retried with the next pass.
   */
  async start(): Promise<void> {
    this.#unsubscribe = this.#o.nodes.onChange(() => void this.kick());
    // A deleted node's CIDRs are free, also those we knew of before the cache did.
    this.#o.nodes.on('delete', (obj) => {
      const known = this.#known.get(obj.metadata?.name ?? '');
      if (!this.#stopped && known !== undefined && known.uid === obj.metadata?.uid) this.#known.delete(obj.metadata?.name ?? '');
    });
    await this.kick();
  }

  async #listFresh(): Promise<boolean> {
    let fresh: OperatorNodeView[];
    try {
      fresh = (await this.#o.api.listTendrilNodes()).flatMap((o) => readTendrilNode(o) ?? []);
    } catch (err) {
      this.#o.metrics.apiError('node-list');
      this.#log.warn({ error: describeK8sError(err) }, 'listing the TendrilNodes failed; no CIDR is handed out until a list succeeds');
      return false;
    }
    for (const v of fresh) if (v.ipamPodCIDRs !== undefined) this.#known.set(v.name, { uid: v.uid, cidrs: v.ipamPodCIDRs });
    this.#logForeign(this.#pool.rebuild(fresh.map((v) => ({ name: v.name, cidrs: v.ipamPodCIDRs ?? [] }))));
    const a = this.#pool.allocated();
    this.#log.info({ nodes: fresh.length, ipv4: a[4], ipv6: a[6] }, 'cluster-pool allocation rebuilt from the TendrilNodes');
    return true;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#unsubscribe?.();
    await this.#running?.catch(() => undefined);
  }

  /** Runs a reconcile now, or once more after the one running. Resolves (never rejects) when no reconcile is left to run. */
  kick(): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    if (this.#running !== undefined) {
      this.#again = true;
      return this.#running;
    }
    this.#running = (async () => {
      try {
        do {
          this.#again = false;
          try {
            await this.#reconcile();
          } catch (err) {
            // A bug or an unforeseen answer must not end the controller: the next event or pass tries again.
            this.#log.error({ err }, 'cluster-pool reconcile failed');
          }
        } while (this.#again && !this.#stopped);
      } finally {
        this.#running = undefined;
      }
    })();
    return this.#running;
  }

  #views(): OperatorNodeView[] {
    return this.#o.nodes.list().flatMap((o) => readTendrilNode(o) ?? []);
  }

  /** The node's CIDRs: its cached object's, or what we know the server has if the cache has not caught up. */
  #cidrsOf(v: OperatorNodeView): string[] {
    const w = this.#known.get(v.name);
    if (w !== undefined && w.uid === v.uid && v.ipamPodCIDRs === undefined) return w.cidrs;
    this.#known.delete(v.name);
    return v.ipamPodCIDRs ?? [];
  }

  #logForeign(foreign: ForeignCidr[]): void {
    for (const f of foreign) {
      const key = `${f.node} ${f.cidr} ${f.why}`;
      if (this.#foreignLogged.has(key)) continue;
      this.#foreignLogged.add(key);
      this.#log.warn({ node: f.node, cidr: f.cidr, why: f.why }, 'a TendrilNode holds a CIDR that is not the cluster pool\'s to give; left as it is');
    }
  }

  async #reconcile(): Promise<void> {
    if (!this.#listed) this.#listed = await this.#listFresh();
    if (!this.#listed) return;
    const views = this.#views();
    const live = new Set(views.map((v) => v.name));
    const holdings = views.map((v) => ({ name: v.name, cidrs: this.#cidrsOf(v) }));
    // Nodes the fresh list or our patches know and the cache does not show yet: theirs stay theirs.
    for (const [name, k] of this.#known) if (!live.has(name)) holdings.push({ name, cidrs: k.cidrs });
    this.#logForeign(this.#pool.rebuild(holdings));
    for (const key of [...this.#waiting]) if (!live.has(key.slice(0, key.lastIndexOf('/')))) this.#waiting.delete(key);
    for (const v of views) {
      if (this.#stopped) return;
      const missing = this.#missing(this.#cidrsOf(v));
      if (missing.length > 0) await this.#assign(v, missing);
    }
  }

  #missing(cidrs: readonly string[]): Family[] {
    const have = new Set(cidrs.map(familyOf));
    return this.#pool.families().filter((f) => !have.has(f));
  }

  async #assign(first: OperatorNodeView, families: Family[]): Promise<void> {
    let v = first;
    let want = families;
    for (let attempt = 0; attempt < (this.#o.maxConflicts ?? 5); attempt++) {
      const handed: string[] = [];
      for (const f of want) {
        const cidr = this.#pool.allocate(v.name, f);
        if (cidr !== undefined) {
          handed.push(cidr);
          this.#waiting.delete(`${v.name}/${f}`);
          continue;
        }
        if (!this.#waiting.has(`${v.name}/${f}`)) {
          this.#waiting.add(`${v.name}/${f}`);
          this.#o.metrics.poolExhausted(f);
          this.#log.warn({ node: v.name, family: `ipv${f}`, pools: this.#pool.pools.filter((p) => p.family === f).map((p) => p.name) }, 'cluster pool exhausted: the node waits for a per-node CIDR to come free');
        }
      }
      if (handed.length < want.length) {
        // All families or none: an agent that started on part of them would run single-stack.
        for (const c of handed) this.#pool.free(v.name, c);
        return;
      }
      const cidrs = sortCidrs([...(v.ipamPodCIDRs ?? []), ...handed]);
      try {
        const written = await this.#o.api.patchNodeIpam(v.name, v.resourceVersion, cidrs);
        this.patches++;
        const after = readTendrilNode(written);
        this.#known.set(v.name, { uid: after?.uid ?? v.uid, cidrs: after?.ipamPodCIDRs ?? cidrs });
        this.#log.info({ node: v.name, podCIDRs: cidrs }, 'handed the node its cluster-pool CIDRs');
        return;
      } catch (err) {
        for (const c of handed) this.#pool.free(v.name, c);
        const status = httpStatusOf(err);
        if (status === 404) return;
        if (status !== 409) {
          this.#o.metrics.apiError('node-ipam-patch');
          this.#log.warn({ node: v.name, error: describeK8sError(err) }, 'writing the node\'s cluster-pool CIDRs failed; tried again next pass');
          return;
        }
      }
      // 409: the node moved on since we judged it. Read it again and judge again.
      let fresh: OperatorNodeView | undefined;
      try {
        const obj = await this.#o.api.getTendrilNode(v.name);
        fresh = obj === undefined ? undefined : readTendrilNode(obj);
      } catch (err) {
        this.#o.metrics.apiError('node-get');
        this.#log.warn({ node: v.name, error: describeK8sError(err) }, 'reading the node after a conflict failed; tried again next pass');
        return;
      }
      if (fresh === undefined) return;
      v = fresh;
      this.#known.delete(v.name);
      this.#logForeign(this.#pool.hold(v.name, v.ipamPodCIDRs ?? []));
      want = this.#missing(v.ipamPodCIDRs ?? []);
      if (want.length === 0) return;
    }
    this.#log.warn({ node: v.name }, 'the node kept changing under our patches; tried again next pass');
  }

  allocated(): { 4: number; 6: number } {
    return this.#pool.allocated();
  }
}
