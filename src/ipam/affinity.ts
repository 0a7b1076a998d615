import type { Backend } from '../kvstore/types.js';
import { usedCount } from './block.js';
import { RETRY, casLoop, newStats } from './cas.js';
import { affinityKey, blockKey, hostAffinityPrefix } from './keys.js';
import { type AffinityRecord, AffinityRecordSchema, type BlockRecord, decode, encode } from './records.js';
import { IpamStore } from './store.js';
import type { IpamStats } from './types.js';

export interface HostAffinity {
  cidr: string;
  rec: AffinityRecord;
  rev: number;
}

export type ClaimOutcome = 'claimed' | 'taken';

/**
 * Block affinity, Calico's two-phase way: write the host's affinity as
 * `pending`, take the block key by CAS (create it, or adopt an orphan), then
 * confirm the affinity. The block key is the single point of decision, so
 * two hosts racing for one block cannot both end up owning it; a crash
 * between the phases leaves a pending affinity that `resolvePending` settles.
 */
export class AffinityManager {
  constructor(
    private readonly store: IpamStore,
    private readonly now: () => number,
  ) {}

  private get backend(): Backend {
    return this.store.backend;
  }

  private get host(): string {
    return this.store.host;
  }

  async list(host = this.host): Promise<HostAffinity[]> {
    const prefix = hostAffinityPrefix(host);
    const res = await this.backend.list(prefix);
    return res.kvs.map((kv) => ({ cidr: kv.key.slice(prefix.length), rec: decode(AffinityRecordSchema, kv.key, kv.value), rev: kv.modRevision }));
  }

  /** Claims block `cidr` of `pool` for this host; `makeBlock` builds it if nobody created it yet. */
  async claim(cidr: string, pool: string, makeBlock: () => BlockRecord): Promise<ClaimOutcome> {
    const aKey = affinityKey(this.host, cidr);
    const bKey = blockKey(cidr);
    const stats = this.store.stats;
    const retries = this.store.maxRetries;
    // Phase 1: pending affinity. If one already exists it is ours from an earlier attempt.
    const pending: AffinityRecord = { state: 'pending', pool, since: this.now() };
    await this.backend.txn({ compare: [{ key: aKey, target: 'exists', value: false }], success: [{ type: 'put', key: aKey, value: encode(pending) }] });

    // Phase 2: the block key decides.
    const won = await casLoop(stats, `claim block ${cidr}`, retries, async () => {
      const b = await this.store.readBlock(cidr);
      if (b === undefined) {
        const r = await this.backend.txn({
          compare: [{ key: bKey, target: 'exists', value: false }],
          success: [{ type: 'put', key: bKey, value: encode(makeBlock()) }],
        });
        return r.succeeded ? true : RETRY;
      }
      if (b.rec.affinity === this.host) return true;
      if (b.rec.affinity !== null) return false;
      // Orphaned block (its host was removed while it held addresses): adopt it.
      const r = await this.backend.txn({
        compare: [{ key: bKey, target: 'modRevision', value: b.rev }],
        success: [{ type: 'put', key: bKey, value: encode({ ...b.rec, affinity: this.host }) }],
      });
      return r.succeeded ? true : RETRY;
    });
    if (!won) {
      // Withdraw the pending claim — ours from this attempt or one a crash left behind.
      const cur = await this.backend.get(aKey);
      if (cur !== undefined && decode(AffinityRecordSchema, aKey, cur.value).state === 'pending') {
        await this.backend.txn({ compare: [{ key: aKey, target: 'modRevision', value: cur.modRevision }], success: [{ type: 'delete', key: aKey }] });
      }
      return 'taken';
    }
    // Phase 3: confirm. Unconditional put is safe: the block is ours, and only this host writes its affinity keys.
    await this.backend.put(aKey, encode({ state: 'confirmed', pool, since: this.now() } satisfies AffinityRecord));
    stats.blocksClaimed += 1;
    return 'claimed';
  }

  /** Settles pending affinities a crash left between the phases. */
  async resolvePending(): Promise<void> {
    for (const a of await this.list()) {
      if (a.rec.state !== 'pending') continue;
      const b = await this.store.readBlock(a.cidr);
      const aKey = affinityKey(this.host, a.cidr);
      if (b !== undefined && b.rec.affinity === this.host) {
        await this.backend.txn({
          compare: [{ key: aKey, target: 'modRevision', value: a.rev }],
          success: [{ type: 'put', key: aKey, value: encode({ ...a.rec, state: 'confirmed' }) }],
        });
      } else {
        await this.backend.txn({ compare: [{ key: aKey, target: 'modRevision', value: a.rev }], success: [{ type: 'delete', key: aKey }] });
      }
    }
  }

  /** Gives back this host's blocks that hold no address (block and affinity deleted together). */
  async releaseEmptyBlocks(keep: (cidr: string) => boolean = () => false): Promise<string[]> {
    const released: string[] = [];
    for (const a of await this.list()) {
      if (a.rec.state !== 'confirmed' || keep(a.cidr)) continue;
      const done = await casLoop(this.store.stats, `release block ${a.cidr}`, this.store.maxRetries, async () => {
        const b = await this.store.readBlock(a.cidr);
        if (b === undefined || b.rec.affinity !== this.host || usedCount(b.rec) > 0) return false;
        const r = await this.backend.txn({
          compare: [
            { key: blockKey(a.cidr), target: 'modRevision', value: b.rev },
            { key: affinityKey(this.host, a.cidr), target: 'modRevision', value: a.rev },
          ],
          success: [
            { type: 'delete', key: blockKey(a.cidr) },
            { type: 'delete', key: affinityKey(this.host, a.cidr) },
          ],
        });
        return r.succeeded ? true : RETRY;
      });
      if (done) {
        released.push(a.cidr);
        this.store.stats.blocksReleased += 1;
      }
    }
    return released;
  }
}

export interface RemoveHostOptions {
  /**
   * Also release every address whose handle belongs to the host (its pods are
   * gone with it). Cluster-pool does this by default: the per-node CIDR is
   * returned whole. Otherwise non-empty blocks are kept, orphaned.
   */
  releaseAllocations?: boolean;
  maxRetries?: number;
  stats?: IpamStats;
}

export interface RemoveHostReport {
  releasedOwners: string[];
  /** Blocks deleted with their affinity. */
  deletedBlocks: string[];
  /** Non-empty blocks left without affinity (other hosts may borrow or adopt them). */
  orphanedBlocks: string[];
}

/**
 * Removes a host from IPAM: all its affinities go; empty blocks are deleted,
 * non-empty ones orphaned. Run by an operator or by the node registry when a
 * node is deleted, never by the host itself while it runs.
 */
export async function removeHost(backend: Backend, host: string, opts: RemoveHostOptions = {}): Promise<RemoveHostReport> {
  const stats = opts.stats ?? newStats();
  const store = new IpamStore(backend, host, stats, opts.maxRetries ?? 30);
  const report: RemoveHostReport = { releasedOwners: [], deletedBlocks: [], orphanedBlocks: [] };
  if (opts.releaseAllocations === true) {
    for (const h of await store.listHostHandles(host)) {
      if (h.host !== host) continue;
      if ((await store.releaseOwner(h.owner, (cur) => cur.host === host)) !== undefined) report.releasedOwners.push(h.owner);
    }
  }
  const affinities = new AffinityManager(store, Date.now);
  for (const a of await affinities.list(host)) {
    const aKey = affinityKey(host, a.cidr);
    const bKey = blockKey(a.cidr);
    await casLoop(stats, `remove ${host} affinity ${a.cidr}`, store.maxRetries, async () => {
      const b = await store.readBlock(a.cidr);
      const compare = [
        { key: aKey, target: 'exists' as const, value: true },
        { key: bKey, target: 'modRevision' as const, value: b?.rev ?? 0 },
      ];
      if (b === undefined || b.rec.affinity !== host) {
        const r = await backend.txn({ compare, success: [{ type: 'delete', key: aKey }] });
        return r.succeeded ? undefined : RETRY;
      }
      const empty = usedCount(b.rec) === 0;
      const r = await backend.txn({
        compare,
        success: empty
          ? [{ type: 'delete', key: bKey }, { type: 'delete', key: aKey }]
          : [{ type: 'put', key: bKey, value: encode({ ...b.rec, affinity: null }) }, { type: 'delete', key: aKey }],
      });
      if (!r.succeeded) return RETRY;
      (empty ? report.deletedBlocks : report.orphanedBlocks).push(a.cidr);
      return undefined;
    });
  }
  return report;
}

