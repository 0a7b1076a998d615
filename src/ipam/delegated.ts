import { z } from 'zod';
import { CniError, type CurrentResult, toCurrent, versionAtLeast } from '../cni/index.js';
import type { Backend } from '../kvstore/types.js';
import { type DelegateContext, delegateAdd, delegateCheck, delegateDel, delegateGc } from '../libcni/delegate.js';
import type { PluginExec } from '../libcni/exec.js';
import { type Logger, createLogger } from '../logging/logger.js';
import { RETRY, casLoop, newStats, DEFAULT_MAX_RETRIES } from './cas.js';
import { formatPrefix } from '../netip/index.js';
import { parseCidr } from './cidr.js';
import { IpamError, IpamErrorCode, poolExhausted } from './errors.js';
import { Expirer, readDeadlines } from './expirer.js';
import { delegatedExpiryKey as expiryKey, delegatedKey, hostDelegatedExpiryPrefix as hostExpiryPrefix, hostDelegatedPrefix } from './keys.js';
import { decode, encode } from './records.js';
import type { AllocateRequest, Allocation, Allocator, GcOptions, GcReport, IpamMode, IpamStats, ReleaseIpOptions } from './types.js';
import { validateName } from './kvAllocator.js';

export interface DelegatedOptions {
  backend: Backend;
  host: string;
  /**
   * Network configuration handed to the IPAM plugin, as a CNI runtime would:
   * `{cniVersion, name, ipam: {type: 'host-local', ranges, dataDir, …}}`.
   */
  netconf: { cniVersion: string; name: string; ipam: { type: string; [k: string]: unknown }; [k: string]: unknown };
  /** Directories searched for the plugin (CNI_PATH). */
  cniPath: string[];
  exec?: PluginExec;
  now?: () => number;
  autoExpire?: boolean;
  maxRetries?: number;
  logger?: Logger;
}

/** What the plugin handed out for one owner, kept so DEL/GC work after a restart. */
const DelegatedRecordSchema = z.object({
  owner: z.string(),
  ifname: z.string(),
  result: z.looseObject({ cniVersion: z.string() }),
  allocations: z.array(
    z.object({
      family: z.union([z.literal(4), z.literal(6)]),
      ip: z.string(),
      prefixLength: z.number(),
      gateway: z.string().optional(),
      cidr: z.string(),
    }),
  ),
  expiresAt: z.number().optional(),
});
type DelegatedRecord = z.infer<typeof DelegatedRecordSchema>;

const PLACEHOLDER_NETNS = '/var/run/netns/tendril-ipam-delegate';

/**
 * Delegated IPAM: an IPAM plugin (host-local, dhcp, …) does the allocation
 * through the libcni delegate helpers; this adapter gives it the common
 * interface. One plugin ADD covers every family its ranges configure, so the
 * first allocate of an owner runs ADD and the next family is served from the
 * recorded result. DEL, CHECK and GC are forwarded; release by IP releases
 * the whole owner, because that is all a CNI plugin can do.
 */
export class DelegatedAllocator implements Allocator {
  readonly mode: IpamMode = 'delegated';
  readonly host: string;
  private readonly backend: Backend;
  private readonly netconfText: string;
  private readonly now: () => number;
  private readonly statsRec: IpamStats = newStats();
  private readonly expirer: Expirer | undefined;
  private readonly maxRetries: number;
  private readonly log: Logger;

  constructor(private readonly opts: DelegatedOptions) {
    validateName('host', opts.host);
    if (typeof opts.netconf.ipam?.type !== 'string' || opts.netconf.ipam.type === '') {
      throw new IpamError(IpamErrorCode.INVALID_CONFIG, 'delegated IPAM needs netconf.ipam.type');
    }
    if (opts.cniPath.length === 0) throw new IpamError(IpamErrorCode.INVALID_CONFIG, 'delegated IPAM needs a CNI path');
    this.host = opts.host;
    this.backend = opts.backend;
    this.netconfText = JSON.stringify(opts.netconf);
    this.now = opts.now ?? Date.now;
    this.maxRetries = opts.maxRetries ?? DEFAULT_MAX_RETRIES;
    this.log = opts.logger ?? createLogger('ipam');
    if (opts.autoExpire ?? true) {
      this.expirer = new Expirer(() => this.sweep().then((r) => r.next), this.now, (err) => this.log.warn({ err }, 'delegated ipam expiry sweep failed'));
    }
  }

  get pluginType(): string {
    return this.opts.netconf.ipam.type;
  }

  private ctx(owner: string, ifname: string, cni?: AllocateRequest['cni']): DelegateContext {
    return {
      env: {
        CNI_CONTAINERID: owner,
        CNI_IFNAME: ifname,
        // host-local never enters the namespace, but the CNI skel insists on the variable for ADD/CHECK.
        CNI_NETNS: cni?.netns ?? PLACEHOLDER_NETNS,
        CNI_PATH: this.opts.cniPath.join(':'),
        ...(cni?.args !== undefined ? { CNI_ARGS: cni.args } : {}),
      },
      ...(this.opts.exec !== undefined ? { exec: this.opts.exec } : {}),
    };
  }

  private async read(owner: string): Promise<{ rec: DelegatedRecord; rev: number } | undefined> {
    const key = delegatedKey(this.host, owner);
    const kv = await this.backend.get(key);
    return kv === undefined ? undefined : { rec: decode(DelegatedRecordSchema, key, kv.value), rev: kv.modRevision };
  }

  private toAllocations(rec: DelegatedRecord): Allocation[] {
    return rec.allocations.map((a) => ({
      owner: rec.owner,
      family: a.family,
      ip: a.ip,
      prefixLength: a.prefixLength,
      ...(a.gateway !== undefined ? { gateway: a.gateway } : {}),
      pool: this.opts.netconf.name,
      cidr: a.cidr,
      seq: 0,
      ...(rec.expiresAt !== undefined ? { expiresAt: rec.expiresAt } : {}),
    }));
  }

  async start(): Promise<void> {
    this.expirer?.start((await this.sweep()).next);
  }

  async stop(): Promise<void> {
    await this.expirer?.stop();
  }

  routerAddress(): Allocation | undefined {
    // The plugin owns the gateway; it is reported on every allocation instead.
    return undefined;
  }

  stats(): IpamStats {
    return { ...this.statsRec };
  }

  /** The plugin's ranges are its own business (host-local may span several nodes' subnets): none to announce. */
  podCidrs(): string[] {
    return [];
  }

  async allocate(req: AllocateRequest): Promise<Allocation> {
    if (req.ip !== undefined) {
      throw new IpamError(IpamErrorCode.INVALID_ARGUMENT, 'delegated IPAM cannot allocate a given address; the IPAM plugin chooses');
    }
    validateName('owner', req.owner);
    if (req.pool !== undefined && req.pool !== this.opts.netconf.name) {
      throw new IpamError(IpamErrorCode.UNKNOWN_POOL, `delegated IPAM serves only ${this.opts.netconf.name}, not ${req.pool}`, { pool: req.pool });
    }
    let rec = (await this.read(req.owner))?.rec;
    if (rec === undefined) {
      const ifname = req.cni?.ifname ?? 'eth0';
      let result: CurrentResult;
      try {
        result = toCurrent(await delegateAdd(this.pluginType, this.netconfText, this.ctx(req.owner, ifname, req.cni)));
      } catch (err) {
        if (err instanceof CniError && /no IP addresses available|no IPs available|range.*full/i.test(err.message)) {
          throw Object.assign(poolExhausted(this.opts.netconf.name, err.message), { cause: err });
        }
        throw new IpamError(IpamErrorCode.DELEGATE_FAILED, `${this.pluginType} ADD failed: ${(err as Error).message}`, { pool: this.opts.netconf.name }, { cause: err });
      }
      const expiresAt = req.expirationMs === undefined ? undefined : this.now() + req.expirationMs;
      const built: DelegatedRecord = {
        owner: req.owner,
        ifname,
        result,
        allocations: (result.ips ?? []).map((ip) => {
          const c = parseCidr(ip.address, true);
          const slash = ip.address.indexOf('/');
          return {
            family: c.family,
            ip: ip.address.slice(0, slash),
            prefixLength: c.length,
            ...(ip.gateway !== undefined ? { gateway: ip.gateway } : {}),
            cidr: formatPrefix(c),
          };
        }),
        ...(expiresAt !== undefined ? { expiresAt } : {}),
      };
      const key = delegatedKey(this.host, req.owner);
      const r = await this.backend.txn({
        compare: [{ key, target: 'exists', value: false }],
        success: [
          { type: 'put', key, value: encode(built) },
          ...(expiresAt !== undefined ? [{ type: 'put' as const, key: expiryKey(this.host, req.owner), value: String(expiresAt) }] : []),
        ],
      });
      if (!r.succeeded) {
        // A concurrent ADD for the same owner recorded first; the plugin answered both with the same addresses.
        this.statsRec.casRetries += 1;
        rec = (await this.read(req.owner))?.rec ?? built;
      } else {
        rec = built;
        this.statsRec.allocations += built.allocations.length;
        if (expiresAt !== undefined) this.expirer?.arm(expiresAt);
      }
    }
    const a = this.toAllocations(rec).find((x) => x.family === req.family);
    if (a === undefined) {
      throw new IpamError(IpamErrorCode.FAMILY_UNAVAILABLE, `${this.pluginType} gave ${req.owner} no IPv${req.family} address`, { pool: this.opts.netconf.name });
    }
    return a;
  }

  async confirm(owner: string): Promise<boolean> {
    validateName('owner', owner);
    return casLoop(this.statsRec, `confirm ${owner}`, this.maxRetries, async () => {
      const cur = await this.read(owner);
      if (cur === undefined) return false;
      if (cur.rec.expiresAt === undefined) return true;
      const { expiresAt: _drop, ...rest } = cur.rec;
      const key = delegatedKey(this.host, owner);
      const r = await this.backend.txn({
        compare: [{ key, target: 'modRevision', value: cur.rev }],
        success: [
          { type: 'put', key, value: encode(rest) },
          { type: 'delete', key: expiryKey(this.host, owner) },
        ],
      });
      return r.succeeded ? true : RETRY;
    });
  }

  async get(owner: string): Promise<Allocation[]> {
    validateName('owner', owner);
    const cur = await this.read(owner);
    return cur === undefined ? [] : this.toAllocations(cur.rec);
  }

  async list(): Promise<Allocation[]> {
    const prefix = hostDelegatedPrefix(this.host);
    const res = await this.backend.list(prefix);
    return res.kvs.flatMap((kv) => this.toAllocations(decode(DelegatedRecordSchema, kv.key, kv.value)));
  }

  /** Forwards DEL, then forgets the record. The record goes only after DEL succeeded, so a failed DEL can be retried. */
  private async release(owner: string, only?: (rec: DelegatedRecord) => boolean): Promise<Allocation[] | undefined> {
    const cur = await this.read(owner);
    if (cur !== undefined && only !== undefined && !only(cur.rec)) return undefined;
    try {
      await delegateDel(this.pluginType, this.netconfText, this.ctx(owner, cur?.rec.ifname ?? 'eth0'));
    } catch (err) {
      throw new IpamError(IpamErrorCode.DELEGATE_FAILED, `${this.pluginType} DEL failed: ${(err as Error).message}`, { pool: this.opts.netconf.name }, { cause: err });
    }
    if (cur === undefined) return [];
    await this.backend.txn({
      compare: [{ key: delegatedKey(this.host, owner), target: 'modRevision', value: cur.rev }],
      success: [
        { type: 'delete', key: delegatedKey(this.host, owner) },
        { type: 'delete', key: expiryKey(this.host, owner) },
      ],
    });
    this.statsRec.releases += cur.rec.allocations.length;
    return this.toAllocations(cur.rec);
  }

  async releaseOwner(owner: string): Promise<Allocation[]> {
    validateName('owner', owner);
    // Unknown owner: DEL is still forwarded, in case the plugin allocated before a crash kept us from recording it.
    return (await this.release(owner)) ?? [];
  }

  async releaseIp(ip: string, opts: ReleaseIpOptions = {}): Promise<boolean> {
    const owner = (await this.list()).find((a) => a.ip === ip)?.owner;
    if (owner === undefined || (opts.owner !== undefined && opts.owner !== owner)) return false;
    return ((await this.release(owner)) ?? []).length > 0;
  }

  /** Forwards CHECK for the owner with its recorded result as prevResult. */
  async check(owner: string): Promise<void> {
    validateName('owner', owner);
    const cur = await this.read(owner);
    if (cur === undefined) throw new IpamError(IpamErrorCode.INVALID_ARGUMENT, `no delegated allocation for ${owner}`);
    const conf = JSON.stringify({ ...this.opts.netconf, prevResult: cur.rec.result });
    try {
      await delegateCheck(this.pluginType, conf, this.ctx(owner, cur.rec.ifname));
    } catch (err) {
      throw new IpamError(IpamErrorCode.DELEGATE_FAILED, `${this.pluginType} CHECK failed: ${(err as Error).message}`, { pool: this.opts.netconf.name }, { cause: err });
    }
  }

  async expire(): Promise<Allocation[]> {
    return (await this.sweep()).released;
  }

  private async sweep(): Promise<{ released: Allocation[]; next: number | undefined }> {
    const now = this.now();
    const released: Allocation[] = [];
    const { due, next } = await readDeadlines(this.backend, hostExpiryPrefix(this.host), now);
    for (const { owner } of due) {
      const r = await this.release(owner, (rec) => rec.expiresAt !== undefined && rec.expiresAt <= now);
      if (r === undefined || r.length === 0) continue;
      this.statsRec.expired += 1;
      released.push(...r);
    }
    return { released, next };
  }

  async gc(liveOwners: ReadonlySet<string>, opts: GcOptions = {}): Promise<GcReport> {
    const now = this.now();
    const report: GcReport = { stale: [], released: [], liveWithAddresses: 0 };
    const prefix = hostDelegatedPrefix(this.host);
    const res = await this.backend.list(prefix);
    const live: { containerID: string; ifname: string }[] = [];
    for (const kv of res.kvs) {
      const rec = decode(DelegatedRecordSchema, kv.key, kv.value);
      if (liveOwners.has(rec.owner)) {
        report.liveWithAddresses += 1;
        live.push({ containerID: rec.owner, ifname: rec.ifname });
        continue;
      }
      if (rec.expiresAt !== undefined && rec.expiresAt > now) continue;
      report.stale.push(...this.toAllocations(rec));
      if (opts.dryRun === true) continue;
      const r = await this.release(rec.owner, (cur) => !liveOwners.has(cur.owner));
      if (r !== undefined) report.released.push(...r);
    }
    // Plugins speaking CNI 1.1 also get GC with the valid attachments, which catches what we never recorded.
    if (opts.dryRun !== true && versionAtLeast(this.opts.netconf.cniVersion, '1.1.0')) {
      const conf = JSON.stringify({ ...this.opts.netconf, 'cni.dev/valid-attachments': live });
      await delegateGc(this.pluginType, conf, { env: { CNI_PATH: this.opts.cniPath.join(':') }, ...(this.opts.exec ? { exec: this.opts.exec } : {}) });
    }
    return report;
  }
}


