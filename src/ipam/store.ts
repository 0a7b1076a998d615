import type { Backend, Compare, TxnOp } from '../kvstore/types.js';
import { assign, findFree, ipAt, isReserved, ordinalOf } from './block.js';
import { RETRY, casLoop } from './cas.js';
import { blockKey, expiryKey, handleKey, hostHandleKey, hostHandlesPrefix } from './keys.js';
import { type BlockRecord, BlockRecordSchema, type HandleAddr, type HandleRecord, HandleRecordSchema, decode, encode } from './records.js';
import type { IpFamily, IpamStats } from './types.js';

export interface Versioned<T> {
  rec: T;
  /** modRevision of the key, the CAS token. */
  rev: number;
}

export interface AssignOptions {
  family: IpFamily;
  expiresAt?: number;
  /** Prefix length reported for addresses of this block. */
  prefixLength: (b: BlockRecord) => number;
  /** Last look at the freshly read block: false skips it (e.g. it changed hands). */
  mayUse?: (b: BlockRecord) => boolean;
  /** This address and no other (it must lie in the block); 'taken' when it is in use or reserved. */
  ip?: string;
}

export type AssignOutcome =
  | {
      addr: HandleAddr;
      /** False when the owner already held an address of the family (nothing written). */
      fresh: boolean;
      block: BlockRecord | undefined;
      /** The owner's deadline after the write (undefined once confirmed or when permanent). */
      expiresAt: number | undefined;
    }
  | 'full'
  | 'unusable'
  | 'taken';

/**
 * The block and handle records in the kvstore and the transactions that
 * change them. Every write compares the modRevision of each key it read, so
 * a block and the handles pointing into it always change together or not at
 * all: there is no window in which an address is taken but unindexed.
 */
export class IpamStore {
  constructor(
    readonly backend: Backend,
    readonly host: string,
    readonly stats: IpamStats,
    readonly maxRetries: number,
  ) {}

  async readBlock(cidr: string): Promise<Versioned<BlockRecord> | undefined> {
    const key = blockKey(cidr);
    const kv = await this.backend.get(key);
    return kv === undefined ? undefined : { rec: decode(BlockRecordSchema, key, kv.value), rev: kv.modRevision };
  }

  async readHandle(owner: string): Promise<Versioned<HandleRecord> | undefined> {
    const key = handleKey(owner);
    const kv = await this.backend.get(key);
    return kv === undefined ? undefined : { rec: decode(HandleRecordSchema, key, kv.value), rev: kv.modRevision };
  }

  /** Handles of one host, from its index (one prefix listing, not the cluster's handles). */
  async listHostHandles(host = this.host): Promise<HandleRecord[]> {
    const res = await this.backend.list(hostHandlesPrefix(host));
    return res.kvs.map((kv) => decode(HandleRecordSchema, kv.key, kv.value));
  }

  /**
   * Takes a free address of `cidr` for `owner`. If the owner already holds an
   * address of this family it is returned unchanged (fresh=false): an ADD
   * retried after a crash must not take a second address.
   */
  async assign(cidr: string, owner: string, opts: AssignOptions): Promise<AssignOutcome> {
    return casLoop(this.stats, `allocate in ${cidr}`, this.maxRetries, async () => {
      const [b, h] = await Promise.all([this.readBlock(cidr), this.readHandle(owner)]);
      const held = h?.rec.addrs.find((a) => a.family === opts.family);
      if (h !== undefined && held !== undefined) return { addr: held, fresh: false, block: b?.rec, expiresAt: h.rec.expiresAt };
      if (b === undefined || (opts.mayUse !== undefined && !opts.mayUse(b.rec))) return 'unusable' as const;
      const block = structuredClone(b.rec);
      let ord: bigint | undefined;
      if (opts.ip !== undefined) {
        ord = ordinalOf(block, opts.ip);
        if (ord === undefined || isReserved(block, ord) || block.allocs[ord.toString()] !== undefined) return 'taken' as const;
      } else {
        ord = findFree(block);
        if (ord === undefined) return 'full' as const;
      }
      const seq = assign(block, ord, owner);
      const addr: HandleAddr = { family: opts.family, ip: ipAt(block, ord), cidr: block.cidr, pool: block.pool, seq, prefixLength: opts.prefixLength(block) };
      const handle: HandleRecord =
        h === undefined
          ? { owner, host: this.host, addrs: [addr], ...(opts.expiresAt !== undefined ? { expiresAt: opts.expiresAt } : {}) }
          : { ...h.rec, addrs: [...h.rec.addrs, addr] };
      const success: TxnOp[] = [
        { type: 'put', key: blockKey(cidr), value: encode(block) },
        ...putHandle(handle),
      ];
      if (h === undefined && opts.expiresAt !== undefined) {
        success.push({ type: 'put', key: expiryKey(this.host, owner), value: String(opts.expiresAt) });
      }
      const r = await this.backend.txn({
        compare: [
          { key: blockKey(cidr), target: 'modRevision', value: b.rev },
          { key: handleKey(owner), target: 'modRevision', value: h?.rev ?? 0 },
        ],
        success,
      });
      return r.succeeded ? { addr, fresh: true, block, expiresAt: handle.expiresAt } : RETRY;
    });
  }

  /**
   * Takes a free address of each block for `owner` in one transaction: a
   * dual-stack pod's two families cost one kvstore write, not two. The items
   * are of distinct families; a family the owner already holds is returned
   * unchanged (fresh=false). Undefined, with nothing written, when any block
   * is missing, not usable or full: the caller then takes the families one
   * by one, whose errors say which.
   */
  async assignEach(items: ReadonlyArray<{ cidr: string; opts: Omit<AssignOptions, 'ip'> }>, owner: string, expiresAt: number | undefined): Promise<Array<{ addr: HandleAddr; fresh: boolean; expiresAt: number | undefined }> | undefined> {
    return casLoop(this.stats, `allocate in ${items.map((i) => i.cidr).join(', ')}`, this.maxRetries, async () => {
      const [h, ...blocks] = await Promise.all([this.readHandle(owner), ...items.map((i) => this.readBlock(i.cidr))]);
      const addrs: HandleAddr[] = [...(h?.rec.addrs ?? [])];
      const out: Array<{ addr: HandleAddr; fresh: boolean }> = [];
      const success: TxnOp[] = [];
      const compare: Compare[] = [{ key: handleKey(owner), target: 'modRevision', value: h?.rev ?? 0 }];
      for (const [i, item] of items.entries()) {
        const held = h?.rec.addrs.find((a) => a.family === item.opts.family);
        if (held !== undefined) {
          out.push({ addr: held, fresh: false });
          continue;
        }
        const b = blocks[i];
        if (b === undefined || (item.opts.mayUse !== undefined && !item.opts.mayUse(b.rec))) return undefined;
        const block = structuredClone(b.rec);
        const ord = findFree(block);
        if (ord === undefined) return undefined;
        const seq = assign(block, ord, owner);
        const addr: HandleAddr = { family: item.opts.family, ip: ipAt(block, ord), cidr: block.cidr, pool: block.pool, seq, prefixLength: item.opts.prefixLength(block) };
        addrs.push(addr);
        out.push({ addr, fresh: true });
        compare.push({ key: blockKey(item.cidr), target: 'modRevision', value: b.rev });
        success.push({ type: 'put', key: blockKey(item.cidr), value: encode(block) });
      }
      // Every family already held (a retried ADD): nothing to write.
      if (success.length === 0) return out.map((o) => ({ ...o, expiresAt: h?.rec.expiresAt }));
      const handle: HandleRecord = h === undefined ? { owner, host: this.host, addrs, ...(expiresAt !== undefined ? { expiresAt } : {}) } : { ...h.rec, addrs };
      success.push(...putHandle(handle));
      if (h === undefined && expiresAt !== undefined) success.push({ type: 'put', key: expiryKey(this.host, owner), value: String(expiresAt) });
      const r = await this.backend.txn({ compare, success });
      return r.succeeded ? out.map((o) => ({ ...o, expiresAt: handle.expiresAt })) : RETRY;
    });
  }

  /**
   * Frees every address of `owner` and deletes its handle in one transaction.
   * `only` is checked on the handle as read inside the CAS loop, so a condition
   * like "still provisional and past its deadline" cannot race a confirm.
   */
  async releaseOwner(owner: string, only?: (h: HandleRecord) => boolean): Promise<{ handle: HandleRecord; addrs: HandleAddr[] } | undefined> {
    return casLoop(this.stats, `release ${owner}`, this.maxRetries, async () => {
      const h = await this.readHandle(owner);
      if (h === undefined || (only !== undefined && !only(h.rec))) return undefined;
      const cidrs = [...new Set(h.rec.addrs.map((a) => a.cidr))];
      const blocks = await Promise.all(cidrs.map((c) => this.readBlock(c)));
      const compare: Compare[] = [{ key: handleKey(owner), target: 'modRevision', value: h.rev }];
      const success: TxnOp[] = deleteHandle(h.rec);
      cidrs.forEach((cidr, i) => {
        const b = blocks[i];
        compare.push({ key: blockKey(cidr), target: 'modRevision', value: b?.rev ?? 0 });
        if (b === undefined) return;
        const block = structuredClone(b.rec);
        let changed = false;
        for (const a of h.rec.addrs) {
          if (a.cidr !== cidr) continue;
          const ord = ordinalOf(block, a.ip);
          const cur = ord === undefined ? undefined : block.allocs[ord.toString()];
          // The sequence number proves this entry is the one the handle recorded.
          if (ord !== undefined && cur !== undefined && cur.owner === owner && cur.seq === a.seq) {
            delete block.allocs[ord.toString()];
            changed = true;
          }
        }
        if (changed) success.push({ type: 'put', key: blockKey(cidr), value: encode(block) });
      });
      const r = await this.backend.txn({ compare, success });
      return r.succeeded ? { handle: h.rec, addrs: h.rec.addrs } : RETRY;
    });
  }

  /** Frees one address of block `cidr`, honouring owner/seq guards; returns what was freed. */
  async releaseIp(cidr: string, ip: string, guard: { owner?: string; seq?: number }): Promise<{ owner: string; addr: HandleAddr | undefined } | undefined> {
    return casLoop(this.stats, `release ${ip}`, this.maxRetries, async () => {
      const b = await this.readBlock(cidr);
      if (b === undefined) return undefined;
      const ord = ordinalOf(b.rec, ip);
      if (ord === undefined) return undefined;
      const cur = b.rec.allocs[ord.toString()];
      if (cur === undefined) return undefined;
      if (guard.owner !== undefined && cur.owner !== guard.owner) return undefined;
      if (guard.seq !== undefined && cur.seq !== guard.seq) return undefined;
      const h = await this.readHandle(cur.owner);
      const block = structuredClone(b.rec);
      delete block.allocs[ord.toString()];
      const compare: Compare[] = [
        { key: blockKey(cidr), target: 'modRevision', value: b.rev },
        { key: handleKey(cur.owner), target: 'modRevision', value: h?.rev ?? 0 },
      ];
      const success: TxnOp[] = [{ type: 'put', key: blockKey(cidr), value: encode(block) }];
      let addr: HandleAddr | undefined;
      if (h !== undefined) {
        addr = h.rec.addrs.find((a) => a.ip === ip && a.seq === cur.seq);
        const rest = h.rec.addrs.filter((a) => a !== addr);
        if (rest.length === 0) {
          success.push(...deleteHandle(h.rec));
        } else {
          success.push(...putHandle({ ...h.rec, addrs: rest }));
        }
      }
      const r = await this.backend.txn({ compare, success });
      return r.succeeded ? { owner: cur.owner, addr } : RETRY;
    });
  }

  /** Clears the owner's deadline; false when the owner holds nothing. */
  async confirm(owner: string): Promise<boolean> {
    return casLoop(this.stats, `confirm ${owner}`, this.maxRetries, async () => {
      const h = await this.readHandle(owner);
      if (h === undefined) return false;
      if (h.rec.expiresAt === undefined) return true;
      const rec: HandleRecord = { owner: h.rec.owner, host: h.rec.host, addrs: h.rec.addrs };
      const r = await this.backend.txn({
        compare: [{ key: handleKey(owner), target: 'modRevision', value: h.rev }],
        success: [...putHandle(rec), { type: 'delete', key: expiryKey(h.rec.host, owner) }],
      });
      return r.succeeded ? true : RETRY;
    });
  }
}

/** Writes a handle and its host-index copy (always together, in one transaction). */
function putHandle(h: HandleRecord): TxnOp[] {
  const value = encode(h);
  return [
    { type: 'put', key: handleKey(h.owner), value },
    { type: 'put', key: hostHandleKey(h.host, h.owner), value },
  ];
}

/** Deletes a handle with its index copy and deadline. */
function deleteHandle(h: HandleRecord): TxnOp[] {
  return [
    { type: 'delete', key: handleKey(h.owner) },
    { type: 'delete', key: hostHandleKey(h.host, h.owner) },
    { type: 'delete', key: expiryKey(h.host, h.owner) },
  ];
}
