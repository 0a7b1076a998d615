import type { NetConf } from '../cni/index.js';
import type { Allocation, Allocator, IpFamily } from './types.js';
import { IpamError, IpamErrorCode } from './errors.js';
import { BlockAllocator } from './blockAllocator.js';
import { ClusterPoolAllocator } from './clusterPool.js';
import { DelegatedAllocator } from './delegated.js';
import { HostScopeAllocator } from './hostScope.js';
import type { AddressClaim, EndpointAddress } from '../endpoint/index.js';
import type { Backend } from '../kvstore/types.js';
import type { Logger } from '../logging/logger.js';
import { formatIp, tryParseIp } from '../netip/index.js';
import { SerialAllocator } from './serialAllocator.js';

/** The agent settings IPAM is built from (the agent's configuration has them; ipamExpirationMs may change while it runs). */
export interface IpamProviderConfig {
  nodeName: string;
  ipam: 'host-scope' | 'cluster-pool' | 'block' | 'delegated' | 'kubernetes';
  podCidrs: string[];
  clusterPoolCidrs: string[];
  clusterPoolMaskSize?: number | undefined;
  poolCidrs: string[];
  blockSize?: number | undefined;
  strictAffinity: boolean;
  cniPath: string[];
  ipamExpirationMs: number;
}

/**
 * The agent's IPAM: one allocator for the node in the kvstore-backed modes;
 * in delegated mode one adapter per distinct `ipam` section of the netconfs
 * the runtime sends (as a delegating CNI plugin would run its IPAM plugin).
 */
export class IpamProvider {
  private main: Allocator | undefined;
  private readonly delegated = new Map<string, Allocator>();

  constructor(
    private readonly config: IpamProviderConfig,
    private readonly backend: Backend,
    private readonly log: Logger,
  ) {
    const common = { backend, host: config.nodeName, logger: log };
    switch (config.ipam) {
      // kubernetes: the agent has put the Node's spec.podCIDRs in podCidrs; from there it is host-scope (router address, allocation, release).
      case 'host-scope':
      case 'kubernetes':
        this.main = new HostScopeAllocator({ ...common, podCidrs: config.podCidrs.map((cidr) => ({ cidr })) });
        break;
      case 'cluster-pool':
        // The Kubernetes-backed mode: tendril-operator handed this node its CIDRs (in podCidrs); the node allocates from them alone.
        if (config.clusterPoolCidrs.length === 0) {
          this.main = new HostScopeAllocator({ ...common, podCidrs: config.podCidrs.map((cidr) => ({ cidr })) });
          break;
        }
        this.main = new ClusterPoolAllocator({
          ...common,
          pools: config.clusterPoolCidrs.map((cidr) => ({ cidr })),
          ...(config.clusterPoolMaskSize ? { maskSize: { 4: config.clusterPoolMaskSize, 6: config.clusterPoolMaskSize } } : {}),
        });
        break;
      case 'block':
        this.main = new BlockAllocator({
          ...common,
          pools: config.poolCidrs.map((cidr) => ({ cidr, ...(config.blockSize ? { blockSize: config.blockSize } : {}) })),
          strictAffinity: config.strictAffinity,
        });
        break;
      case 'delegated':
        this.main = undefined;
        break;
    }
    if (this.main) this.main = new SerialAllocator(this.main);
  }

  get mode(): string {
    return this.config.ipam;
  }

  async start(): Promise<void> {
    await this.main?.start();
  }

  async stop(): Promise<void> {
    await this.main?.stop();
    for (const a of this.delegated.values()) await a.stop();
  }

  /** Families the node hands out addresses for (delegated: whatever the plugin returns). */
  families(): IpFamily[] {
    if (!this.main) return [];
    return ([4, 6] as const).filter((f) => this.main!.routerAddress(f) !== undefined);
  }

  routerAddresses(): Array<{ family: IpFamily; ip: string }> {
    if (!this.main) return [];
    return this.families().map((family) => ({ family, ip: this.main!.routerAddress(family)!.ip }));
  }

  /**
   * Refuses `ip` when it is one of the node's router addresses. The router
   * address is every pod's gateway and sits on tendril_host: freed, the next
   * start would pick another router while the old address stays on the host
   * device, and a pod given it could never reach its gateway. `what` names
   * the operation refused.
   */
  private refuseRouterAddress(ip: string, what: string): void {
    const parsed = tryParseIp(ip);
    if (parsed === undefined) return;
    const text = formatIp(parsed);
    const router = this.routerAddresses().find((r) => formatIp(tryParseIp(r.ip)!) === text);
    if (router) throw new IpamError(IpamErrorCode.IP_IN_USE, `${ip} is this node's router address (the pods' gateway on tendril_host): it cannot be ${what}`);
  }

  /** The allocator for a CNI call's netconf. */
  async allocatorFor(conf: NetConf): Promise<Allocator> {
    if (this.main) return this.main;
    const ipam = conf.ipam;
    if (!ipam || typeof ipam.type !== 'string' || ipam.type === '') {
      throw new IpamError(IpamErrorCode.INVALID_CONFIG, 'the agent runs delegated IPAM: the netconf needs an "ipam" section with a "type"');
    }
    const key = JSON.stringify(ipam);
    let a = this.delegated.get(key);
    if (!a) {
      a = new SerialAllocator(new DelegatedAllocator({
        backend: this.backend,
        host: this.config.nodeName,
        netconf: { cniVersion: '1.0.0', name: conf.name ?? 'tendril', ipam: ipam as { type: string } },
        cniPath: this.config.cniPath,
        logger: this.log,
      }));
      await a.start();
      this.delegated.set(key, a);
    }
    return a;
  }

  /** Every allocator in use (for listing, GC and expiry). */
  all(): Allocator[] {
    return this.main ? [this.main] : [...this.delegated.values()];
  }

  /**
   * The CIDRs this node's pods are numbered from, for the node registry
   * (delegated IPAM: none, its plugin's ranges are not the node's to announce).
   */
  podCidrs(): string[] {
    return this.main?.podCidrs() ?? [];
  }

  /** Calls `cb` after podCidrs() changed (block IPAM claimed or released a block); returns the unsubscribe. */
  onPodCidrsChanged(cb: () => void): () => void {
    return this.main?.onPodCidrsChanged?.(cb) ?? (() => undefined);
  }

  /** Every allocation of this node. */
  async list(): Promise<Allocation[]> {
    const out: Allocation[] = [];
    for (const a of this.all()) out.push(...(await a.list()));
    return out;
  }

  /** The first allocator's counters (the node's; in delegated mode the first plugin's). */
  stats(): Record<string, number> | undefined {
    const first = this.all()[0];
    return first ? { ...first.stats() } : undefined;
  }

  /**
   * POST /ipam (Cilium's plugin-driven flow): an address for an owner, with
   * the node's router addresses as its host addressing. Only the kvstore
   * modes allocate outside a CNI ADD.
   */
  async allocateDirect(req: { owner: string; family: IpFamily; ip?: string; pool?: string; provisional: boolean }): Promise<{ allocation: Allocation; hostAddressing: { ipv4?: string; ipv6?: string } }> {
    const main = this.main;
    if (!main) throw new IpamError(IpamErrorCode.INVALID_ARGUMENT, 'POST /ipam needs a kvstore-backed IPAM mode; delegated IPAM allocates through CNI ADD');
    if (req.ip !== undefined) this.refuseRouterAddress(req.ip, 'allocated to a pod');
    const allocation = await main.allocate({
      owner: req.owner,
      family: req.family,
      ...(req.ip !== undefined ? { ip: req.ip } : {}),
      ...(req.pool ? { pool: req.pool } : {}),
      ...(req.provisional ? { expirationMs: this.config.ipamExpirationMs } : {}),
    });
    const v4 = main.routerAddress(4)?.ip;
    const v6 = main.routerAddress(6)?.ip;
    return { allocation, hostAddressing: { ...(v4 ? { ipv4: v4 } : {}), ...(v6 ? { ipv6: v6 } : {}) } };
  }

  /**
   * Makes IPAM hold a restored endpoint's addresses for `owner` again: after a
   * kvstore lost or rolled back its latest writes, IPAM no longer knows them
   * and would hand them to the next pod. Held already: unchanged. Free:
   * allocated to the owner, permanently. Held by another owner, reserved, or
   * outside this node's pools: a conflict, and the remaining addresses are
   * left as they are. Delegated IPAM keeps its state in its plugin, which
   * the agent cannot ask for a given address outside a CNI call: unchanged.
   */
  async reclaim(owner: string, addresses: readonly EndpointAddress[]): Promise<AddressClaim> {
    const main = this.main;
    if (!main) return { addresses: [...addresses], reclaimed: [] };
    const held = new Set((await main.get(owner)).map((a) => a.ip));
    const out: EndpointAddress[] = [];
    const reclaimed: string[] = [];
    for (const [i, a] of addresses.entries()) {
      if (held.has(a.ip)) {
        out.push(a);
        continue;
      }
      let got: Allocation;
      try {
        got = await main.allocate({ owner, family: a.family, ip: a.ip });
      } catch (err) {
        if (!(err instanceof IpamError)) throw err;
        const conflict = await this.reclaimConflict(main, owner, a.ip, err);
        if (conflict === undefined) throw err;
        return { addresses: [...out, ...addresses.slice(i)], reclaimed, conflict };
      }
      reclaimed.push(a.ip);
      out.push({ ...a, pool: got.pool, cidr: got.cidr, seq: got.seq });
    }
    return { addresses: out, reclaimed };
  }

  /** Why an address cannot be re-claimed; undefined when the failure is not about the address. */
  private async reclaimConflict(main: Allocator, owner: string, ip: string, err: IpamError): Promise<string | undefined> {
    switch (err.code) {
      case IpamErrorCode.IP_IN_USE: {
        const holder = (await main.list()).find((x) => x.ip === ip)?.owner;
        return holder === undefined ? `address ${ip} is reserved in IPAM, or held by another node` : `address ${ip} is allocated to ${holder} in IPAM`;
      }
      case IpamErrorCode.CONFLICT: {
        // The record's owner holds another address of the family: the record and IPAM disagree on which.
        const all = await main.list();
        const holder = all.find((x) => x.ip === ip)?.owner;
        const own = all.filter((x) => x.owner === owner).map((x) => x.ip);
        return `${holder === undefined ? `address ${ip} is free in IPAM` : `address ${ip} is allocated to ${holder} in IPAM`}, which holds ${own.join(', ') || 'other addresses'} for ${owner}`;
      }
      case IpamErrorCode.INVALID_ARGUMENT:
      case IpamErrorCode.UNKNOWN_POOL:
      case IpamErrorCode.FAMILY_UNAVAILABLE:
      case IpamErrorCode.INVALID_CIDR:
        return `address ${ip} cannot be allocated on this node: ${err.message}`;
      default:
        return undefined;
    }
  }

  /**
   * DELETE /ipam/{ip}: frees `ip` unless something still uses it — a live
   * endpoint, or a CNI call in progress for its owner (its address may be
   * provisional): freeing it would hand it to the next pod while this one
   * still has it. false when nothing held it.
   */
  async releaseUnused(ip: string, users: { endpointAt(ip: string): { id: number; containerId: string } | undefined; inFlightOwners(): ReadonlySet<string> }): Promise<boolean> {
    const holder = users.endpointAt(ip);
    if (holder) throw new IpamError(IpamErrorCode.IP_IN_USE, `address ${ip} belongs to endpoint ${holder.id} (container ${holder.containerId}); delete the endpoint to free it`);
    const inFlight = users.inFlightOwners();
    if (inFlight.size > 0) {
      const owner = (await this.list()).find((a) => a.ip === ip)?.owner;
      if (owner !== undefined && inFlight.has(owner)) throw new IpamError(IpamErrorCode.IP_IN_USE, `address ${ip} belongs to ${owner}, whose CNI call is in progress`);
    }
    return this.releaseIp(ip);
  }

  /** Frees one address wherever it is allocated; false when nothing held it. A router address is refused (IP_IN_USE). */
  async releaseIp(ip: string): Promise<boolean> {
    this.refuseRouterAddress(ip, 'released');
    for (const a of this.all()) {
      if (await a.releaseIp(ip)) return true;
    }
    return false;
  }
}
