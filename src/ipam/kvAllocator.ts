import type { Backend } from '../kvstore/types.js';
import { type Logger, createLogger } from '../logging/logger.js';
import { UndoList } from '../async/undoList.js';
import { AffinityManager } from './affinity.js';
import { DEFAULT_MAX_RETRIES, newStats } from './cas.js';
import { IpamError, IpamErrorCode } from './errors.js';
import { Expirer, readDeadlines } from './expirer.js';
import { hostExpiryPrefix } from './keys.js';
import { type Pool, blockOf, selectPools } from './pools.js';
import type { BlockRecord, HandleAddr, HandleRecord } from './records.js';
import { IpamStore } from './store.js';
import type { AllocateRequest, Allocation, Allocator, GcOptions, GcReport, IpFamily, IpamMode, IpamStats, ReleaseIpOptions } from './types.js';

export interface KvAllocatorOptions {
  backend: Backend;
  /** This node's name. */
  host: string;
  /** Allocate the node's router address at start (default true). */
  routerAddress?: boolean;
  /** Bound of every CAS loop (default 30). */
  maxRetries?: number;
  /** Clock, injectable so tests can move time. */
  now?: () => number;
  /** Run expiry sweeps on timers (default true); tests call expire() themselves. */
  autoExpire?: boolean;
  logger?: Logger;
}

/** Owners and hosts become kvstore key segments: no '/', nothing odd. */
const OWNER = /^[A-Za-z0-9][A-Za-z0-9._:@-]{0,252}$/;
const ROUTER_PREFIX = 'tendril:router:';

export function validateName(what: string, value: string): void {
  if (!OWNER.test(value)) throw new IpamError(IpamErrorCode.INVALID_ARGUMENT, `${what} "${value}" must match ${OWNER.source}`);
}

export function routerOwner(host: string): string {
  return `${ROUTER_PREFIX}${host}`;
}

export interface NewAddress {
  addr: HandleAddr;
  borrowed: boolean;
  /** The owner's deadline as written with the address. */
  expiresAt: number | undefined;
  /** False when the owner already held an address of this family. */
  fresh: boolean;
}

/** Turns a successful IpamStore.assign outcome into a NewAddress. */
export function placed(out: { addr: HandleAddr; fresh: boolean; expiresAt: number | undefined }, borrowed: boolean): NewAddress {
  return { addr: out.addr, borrowed: out.fresh && borrowed, expiresAt: out.expiresAt, fresh: out.fresh };
}

/**
 * Everything the kvstore-backed allocators share: the handle index, confirm,
 * release, expiry, GC, the router address and stats. A subclass only decides
 * which blocks an address may come from (`place`) and claims its CIDRs at
 * start (`prepare`).
 */
export abstract class KvAllocator implements Allocator {
  abstract readonly mode: IpamMode;
  readonly host: string;
  protected readonly store: IpamStore;
  protected readonly affinities: AffinityManager;
  protected readonly now: () => number;
  protected readonly log: Logger;
  private readonly statsRec: IpamStats = newStats();
  private readonly routers = new Map<IpFamily, Allocation>();
  private readonly expirer: Expirer | undefined;
  private readonly wantRouter: boolean;
  private readonly podCidrListeners = new Set<() => void>();
  private started = false;

  constructor(
    opts: KvAllocatorOptions,
    protected readonly pools: readonly Pool[],
  ) {
    validateName('host', opts.host);
    this.host = opts.host;
    this.now = opts.now ?? Date.now;
    this.log = opts.logger ?? createLogger('ipam');
    this.store = new IpamStore(opts.backend, opts.host, this.statsRec, opts.maxRetries ?? DEFAULT_MAX_RETRIES);
    this.affinities = new AffinityManager(this.store, this.now);
    this.wantRouter = opts.routerAddress ?? true;
    if (opts.autoExpire ?? true) {
      this.expirer = new Expirer(
        () => this.sweep().then((r) => r.next),
        this.now,
        (err) => this.log.warn({ err }, 'ipam expiry sweep failed'),
      );
    }
  }

  /** Claims the CIDRs this node allocates from. */
  protected abstract prepare(): Promise<void>;
  abstract podCidrs(): string[];

  onPodCidrsChanged(cb: () => void): () => void {
    this.podCidrListeners.add(cb);
    return () => this.podCidrListeners.delete(cb);
  }

  /** Tells listeners podCidrs() changed; a listener's failure is logged, never the allocator's. */
  protected podCidrsChanged(): void {
    for (const cb of this.podCidrListeners) {
      try {
        cb();
      } catch (err) {
        this.log.error({ err }, 'pod CIDR listener threw');
      }
    }
  }
  /** Takes a fresh address of one family from `pools` for `owner`. */
  protected abstract place(owner: string, family: IpFamily, pools: Pool[], expiresAt: number | undefined): Promise<NewAddress>;

  async start(): Promise<void> {
    await this.affinities.resolvePending();
    await this.prepare();
    this.started = true;
    if (this.wantRouter) {
      // The router address comes first, so it is the lowest free address of the node's first CIDR.
      for (const family of [4, 6] as const) {
        if (!this.pools.some((p) => p.family === family)) continue;
        const a = await this.allocate({ owner: routerOwner(this.host), family });
        this.routers.set(family, a);
      }
    }
    const first = (await this.sweep()).next;
    this.expirer?.start(first);
  }

  async stop(): Promise<void> {
    await this.expirer?.stop();
    this.started = false;
  }

  protected assertStarted(): void {
    if (!this.started) throw new IpamError(IpamErrorCode.NOT_STARTED, `${this.mode} allocator for ${this.host} is not started`);
  }

  routerAddress(family: IpFamily): Allocation | undefined {
    return this.routers.get(family);
  }

  stats(): IpamStats {
    return { ...this.statsRec };
  }

  protected toAllocation(owner: string, a: HandleAddr, expiresAt?: number, borrowed?: boolean): Allocation {
    const gw = this.routers.get(a.family);
    return {
      owner,
      family: a.family,
      ip: a.ip,
      prefixLength: a.prefixLength,
      ...(gw !== undefined && gw.ip !== a.ip ? { gateway: gw.ip } : {}),
      pool: a.pool,
      cidr: a.cidr,
      seq: a.seq,
      ...(expiresAt !== undefined ? { expiresAt } : {}),
      ...(borrowed !== undefined ? { borrowed } : {}),
    };
  }

  private handleAllocations(h: HandleRecord): Allocation[] {
    return h.addrs.map((a) => this.toAllocation(h.owner, a, h.expiresAt));
  }

  private checkRequest(req: AllocateRequest): void {
    this.assertStarted();
    validateName('owner', req.owner);
    if (req.family !== 4 && req.family !== 6) throw new IpamError(IpamErrorCode.INVALID_ARGUMENT, `family must be 4 or 6, got ${String(req.family)}`);
    if (req.expirationMs !== undefined && !(Number.isFinite(req.expirationMs) && req.expirationMs > 0)) {
      throw new IpamError(IpamErrorCode.INVALID_ARGUMENT, `expirationMs must be a positive number, got ${req.expirationMs}`);
    }
  }

  /**
   * The one block an address of `family` would come from first, when the
   * mode knows it without claiming anything (host-scope, cluster-pool);
   * undefined: allocateAll takes the families one by one.
   */
  protected firstBlock(_family: IpFamily, _pools: Pool[]): { cidr: string; pool: Pool } | undefined {
    return undefined;
  }

  /**
   * An address of each requested family for one owner (a dual-stack pod),
   * all or none: in one kvstore transaction when every family's first block
   * has room, else one by one, and then a family that fails takes back the
   * addresses this call had already taken (the owner's earlier ones stay).
   */
  async allocateAll(reqs: readonly AllocateRequest[]): Promise<Allocation[]> {
    for (const r of reqs) this.checkRequest(r);
    const owner = reqs[0]?.owner;
    const oneOwner = reqs.every((r) => r.owner === owner && r.ip === undefined && r.pool === undefined && r.expirationMs === reqs[0]!.expirationMs);
    if (owner !== undefined && reqs.length > 1 && oneOwner && new Set(reqs.map((r) => r.family)).size === reqs.length) {
      const blocks = reqs.map((r) => this.firstBlock(r.family, selectPools(this.pools, r.family, undefined)));
      if (blocks.every((b) => b !== undefined)) {
        const expiresAt = reqs[0]!.expirationMs === undefined ? undefined : this.now() + reqs[0]!.expirationMs;
        const items = reqs.map((r, i) => {
          const b = blocks[i]!;
          return { cidr: b.cidr, opts: { family: r.family, prefixLength: (rec: BlockRecord) => this.addressPrefixLength(rec, b.pool), mayUse: (rec: BlockRecord) => rec.affinity === this.host } };
        });
        const outs = await this.store.assignEach(items, owner, expiresAt);
        if (outs !== undefined) {
          const fresh = outs.filter((o) => o.fresh).length;
          this.statsRec.allocations += fresh;
          const deadline = outs[0]?.expiresAt;
          if (deadline !== undefined) this.expirer?.arm(deadline);
          return outs.map((o) => this.toAllocation(owner, o.addr, o.expiresAt, o.fresh ? false : undefined));
        }
      }
    }
    const held = new Set(owner === undefined ? [] : (await this.get(owner)).map((a) => a.ip));
    const undo = new UndoList();
    const out: Allocation[] = [];
    try {
      for (const r of reqs) {
        const a = await this.allocate(r);
        if (!held.has(a.ip)) undo.add(() => this.releaseIp(a.ip, { owner: a.owner }), `release ${a.ip}`);
        out.push(a);
      }
      return out;
    } catch (err) {
      await undo.rollBack(this.log, 'releasing an address of a half-done allocation failed', { owner });
      throw err;
    }
  }

  async allocate(req: AllocateRequest): Promise<Allocation> {
    this.checkRequest(req);
    const pools = selectPools(this.pools, req.family, req.pool);
    const expiresAt = req.expirationMs === undefined ? undefined : this.now() + req.expirationMs;
    // A retried ADD gets the address it already has (no second address, no
    // leak): IpamStore.assign checks the owner's handle in the same read as the block.
    const placed = req.ip === undefined ? await this.place(req.owner, req.family, pools, expiresAt) : await this.placeAt(req.owner, req.family, req.ip, pools, expiresAt);
    if (placed.fresh) {
      this.statsRec.allocations += 1;
      if (placed.borrowed) this.statsRec.borrowed += 1;
    }
    if (placed.expiresAt !== undefined) this.expirer?.arm(placed.expiresAt);
    return this.toAllocation(req.owner, placed.addr, placed.expiresAt, placed.fresh ? placed.borrowed : undefined);
  }

  async confirm(owner: string): Promise<boolean> {
    validateName('owner', owner);
    return this.store.confirm(owner);
  }

  async get(owner: string): Promise<Allocation[]> {
    validateName('owner', owner);
    const h = await this.store.readHandle(owner);
    return h === undefined ? [] : this.handleAllocations(h.rec);
  }

  async releaseOwner(owner: string): Promise<Allocation[]> {
    validateName('owner', owner);
    const r = await this.store.releaseOwner(owner);
    if (r === undefined) return [];
    this.statsRec.releases += r.addrs.length;
    this.onReleased(r.addrs.map((x) => x.cidr));
    return this.handleAllocations(r.handle);
  }

  /** Prefix length reported for an address of `pool` in block `b` (the pod-side configuration). */
  protected abstract addressPrefixLength(b: BlockRecord, pool: Pool): number;

  /** Allocates exactly `ip`, from a block of this host's. */
  private async placeAt(owner: string, family: IpFamily, ip: string, pools: Pool[], expiresAt: number | undefined): Promise<NewAddress> {
    const hit = blockOf(pools, ip); // undefined for an address outside the pools, or no address at all
    if (hit === undefined || hit.pool.cidr.family !== family) {
      throw new IpamError(IpamErrorCode.INVALID_ARGUMENT, `${ip} is not an IPv${family} address in pool ${pools.map((p) => p.name).join(', ')}`);
    }
    const pool = hit.pool;
    const out = await this.store.assign(hit.cidr, owner, { family, expiresAt, ip, prefixLength: (b) => this.addressPrefixLength(b, pool), mayUse: (b) => b.affinity === this.host });
    if (out === 'taken' || out === 'full') throw new IpamError(IpamErrorCode.IP_IN_USE, `${ip} is already allocated or reserved`, { pool: pool.name });
    if (out === 'unusable') throw new IpamError(IpamErrorCode.INVALID_ARGUMENT, `${ip} lies in block ${hit.cidr}, which is not affine to ${this.host}`, { pool: pool.name });
    if (!out.fresh && out.addr.ip !== ip) {
      throw new IpamError(IpamErrorCode.CONFLICT, `owner ${owner} already holds ${out.addr.ip}; release it before asking for ${ip}`, { pool: pool.name });
    }
    return placed(out, false);
  }

  /** Called with the blocks addresses were just released from (a subclass may keep hints). */
  protected onReleased(_cidrs: readonly string[]): void {}

  /** The block that would hold `ip` in this allocator's pools. */
  protected blockFor(ip: string): string | undefined {
    return blockOf(this.pools, ip)?.cidr;
  }

  async releaseIp(ip: string, opts: ReleaseIpOptions = {}): Promise<boolean> {
    const cidr = this.blockFor(ip);
    if (cidr === undefined) return false;
    const r = await this.store.releaseIp(cidr, ip, opts);
    if (r === undefined) return false;
    this.statsRec.releases += 1;
    this.onReleased([cidr]);
    return true;
  }

  async list(): Promise<Allocation[]> {
    const out: Allocation[] = [];
    for (const h of await this.store.listHostHandles()) out.push(...this.handleAllocations(h));
    return out;
  }

  async expire(): Promise<Allocation[]> {
    return (await this.sweep()).released;
  }

  private async sweep(): Promise<{ released: Allocation[]; next: number | undefined }> {
    const now = this.now();
    const released: Allocation[] = [];
    const { due, next } = await readDeadlines(this.store.backend, hostExpiryPrefix(this.host), now);
    for (const { owner, kv } of due) {
      // Re-checked on the handle inside the CAS: a confirm that lands first wins.
      const r = await this.store.releaseOwner(owner, (h) => h.expiresAt !== undefined && h.expiresAt <= now);
      if (r === undefined) {
        // Confirmed or released meanwhile; drop a stray index entry left by nothing else.
        const h = await this.store.readHandle(owner);
        if (h === undefined || h.rec.expiresAt === undefined) await this.store.backend.txn({ compare: [{ key: kv.key, target: 'modRevision', value: kv.modRevision }], success: [{ type: 'delete', key: kv.key }] });
        continue;
      }
      this.statsRec.expired += 1;
      this.statsRec.releases += r.addrs.length;
      this.onReleased(r.addrs.map((x) => x.cidr));
      released.push(...this.handleAllocations(r.handle));
    }
    return { released, next };
  }

  async gc(liveOwners: ReadonlySet<string>, opts: GcOptions = {}): Promise<GcReport> {
    const now = this.now();
    const report: GcReport = { stale: [], released: [], liveWithAddresses: 0 };
    for (const h of await this.store.listHostHandles()) {
      if (h.host !== this.host) continue;
      if (h.owner.startsWith(ROUTER_PREFIX)) continue;
      if (liveOwners.has(h.owner)) {
        report.liveWithAddresses += 1;
        continue;
      }
      // An unexpired provisional allocation is an ADD in flight, which the
      // caller's live set cannot know yet; the expirer owns it.
      if (h.expiresAt !== undefined && h.expiresAt > now) continue;
      report.stale.push(...this.handleAllocations(h));
      if (opts.dryRun === true) continue;
      const r = await this.store.releaseOwner(h.owner, (cur) => cur.host === this.host && !liveOwners.has(cur.owner));
      if (r !== undefined) {
        this.statsRec.releases += r.addrs.length;
        this.onReleased(r.addrs.map((x) => x.cidr));
        report.released.push(...this.handleAllocations(r.handle));
      }
    }
    return report;
  }
}
