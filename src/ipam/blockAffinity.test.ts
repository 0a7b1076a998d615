import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { Backend } from '../kvstore/types.js';
import { AffinityManager, removeHost } from './affinity.js';
import { newBlock } from './block.js';
import { newStats } from './cas.js';
import { IpamStore } from './store.js';
import { BlockAllocator, type BlockAllocatorOptions } from './blockAllocator.js';
import { prefixContainsIp } from '../netip/index.js';
import { parseCidr, parseIp } from './cidr.js';
import { rejectsWithIpamCode } from './contract.js';
import { IpamErrorCode } from './errors.js';
import { IPAM_AFFINITY_PREFIX, IPAM_BLOCKS_PREFIX, affinityKey, blockKey } from './keys.js';
import { type TestBackend, embeddedBackend } from './testing/backends.js';
import { quietLogger } from './testing/subjects.js';

// Block-affinity behaviour beyond the shared contract: several hosts over one
// store, strict affinity, borrowing, maxBlocksPerHost, sequence numbers,
// reserved CIDRs, block release and host removal.
describe('block affinity', () => {
  let tb: TestBackend;
  let kv: Backend;
  const running: BlockAllocator[] = [];

  async function host(name: string, opts: Partial<BlockAllocatorOptions> = {}): Promise<BlockAllocator> {
    const a = new BlockAllocator({
      backend: kv,
      host: name,
      pools: [{ name: 'small', cidr: '10.70.0.0/28', blockSize: 30 }],
      routerAddress: false,
      logger: quietLogger,
      ...opts,
    });
    await a.start();
    running.push(a);
    return a;
  }

  async function blocks(): Promise<Map<string, { affinity: string | null; used: number }>> {
    const out = new Map<string, { affinity: string | null; used: number }>();
    for (const k of (await kv.list(IPAM_BLOCKS_PREFIX)).kvs) {
      const b = JSON.parse(k.value) as { cidr: string; affinity: string | null; allocs: Record<string, unknown> };
      out.set(b.cidr, { affinity: b.affinity, used: Object.keys(b.allocs).length });
    }
    return out;
  }

  beforeEach(async () => {
    tb = await embeddedBackend();
    kv = tb.backend;
  });
  afterEach(async () => {
    for (const a of running.splice(0)) await a.stop();
    await kv.close();
    await tb.cleanup();
  });

  it('uses /26 and /122 blocks by default and gives two hosts different blocks', async () => {
    const pools = [{ name: 'p4', cidr: '10.71.0.0/16' }, { name: 'p6', cidr: 'fd00:71::/112' }];
    const a = await host('host-a', { pools });
    const b = await host('host-b', { pools });
    const a4 = await a.allocate({ owner: 'c1', family: 4 });
    const b4 = await b.allocate({ owner: 'c2', family: 4 });
    const a6 = await a.allocate({ owner: 'c1', family: 6 });
    assert.ok(a4.cidr.endsWith('/26') && b4.cidr.endsWith('/26'));
    assert.ok(a6.cidr.endsWith('/122'));
    assert.notEqual(a4.cidr, b4.cidr);
    assert.equal(a4.prefixLength, 32);
    assert.equal(a6.prefixLength, 128);
    assert.deepEqual((await a.affineBlocks()).sort(), [a4.cidr, a6.cidr].sort());
    const aff = JSON.parse((await kv.get(affinityKey('host-a', a4.cidr)))!.value) as { state: string };
    assert.equal(aff.state, 'confirmed');
  });

  it('fills affine blocks first, then claims new ones, then fails cleanly under strict affinity', async () => {
    const a = await host('host-a', { strictAffinity: true });
    const b = await host('host-b', { strictAffinity: true });
    // 4 blocks of 4: host-a takes three blocks' worth, host-b the last block.
    for (let i = 0; i < 12; i++) await a.allocate({ owner: `a${i}`, family: 4 });
    for (let i = 0; i < 4; i++) await b.allocate({ owner: `b${i}`, family: 4 });
    assert.equal((await a.affineBlocks()).length, 3);
    assert.equal((await b.affineBlocks()).length, 1);
    await a.releaseOwner('a0');
    // host-b may not take host-a's free address.
    await rejectsWithIpamCode(b.allocate({ owner: 'b-extra', family: 4 }), IpamErrorCode.NO_FREE_BLOCK, 'small');
    assert.equal(b.stats().borrowed, 0);
    // host-a still can.
    await a.allocate({ owner: 'a-again', family: 4 });
  });

  it('borrows from another host’s block only when strictAffinity is false', async () => {
    const a = await host('host-a');
    const b = await host('host-b');
    for (let i = 0; i < 15; i++) await a.allocate({ owner: `a${i}`, family: 4 });
    const b0 = await b.allocate({ owner: 'b0', family: 4 });
    assert.equal(b0.borrowed, true);
    const owner = (await blocks()).get(b0.cidr)?.affinity;
    assert.equal(owner, 'host-a', 'borrowing does not move the block');
    assert.equal(b.stats().borrowed, 1);
    await rejectsWithIpamCode(b.allocate({ owner: 'b1', family: 4 }), IpamErrorCode.POOL_EXHAUSTED, 'small');
    // The borrowed address is released like any other.
    assert.equal((await b.releaseOwner('b0')).length, 1);
  });

  it('without autoAllocateBlocks a host only borrows, and a strict one is refused', async () => {
    const a = await host('host-a');
    await a.allocate({ owner: 'a0', family: 4 });
    const lender = (await a.affineBlocks())[0];
    const b = await host('host-b', { autoAllocateBlocks: false });
    const x = await b.allocate({ owner: 'b0', family: 4 });
    assert.equal(x.borrowed, true);
    assert.equal(x.cidr, lender);
    assert.deepEqual(await b.affineBlocks(), []);
    const c = await host('host-c', { autoAllocateBlocks: false, strictAffinity: true });
    await rejectsWithIpamCode(c.allocate({ owner: 'c0', family: 4 }), IpamErrorCode.NO_FREE_BLOCK, 'small');
  });

  it('honours maxBlocksPerHost', async () => {
    const a = await host('host-a', { maxBlocksPerHost: 1, strictAffinity: true });
    for (let i = 0; i < 4; i++) await a.allocate({ owner: `a${i}`, family: 4 });
    await rejectsWithIpamCode(a.allocate({ owner: 'a4', family: 4 }), IpamErrorCode.NO_FREE_BLOCK, 'maxBlocksPerHost 1');
    assert.equal((await blocks()).size, 1);
  });

  it('ignores a stale release whose sequence number predates the re-use of the address', async () => {
    const a = await host('host-a', { pools: [{ name: 'tiny', cidr: '10.72.0.0/30', blockSize: 30 }] });
    const first = await a.allocate({ owner: 'old', family: 4 });
    await a.releaseOwner('old');
    // Cycle through the block until the same address comes back to a new owner.
    let reused;
    for (let i = 0; i < 4 && reused === undefined; i++) {
      const x = await a.allocate({ owner: `n${i}`, family: 4 });
      if (x.ip === first.ip) reused = x;
    }
    assert.ok(reused !== undefined);
    assert.notEqual(reused.seq, first.seq);
    assert.equal(await a.releaseIp(first.ip, { seq: first.seq }), false, 'stale release is a no-op');
    assert.equal((await a.get(reused.owner))[0]?.ip, first.ip);
    assert.equal(await a.releaseIp(first.ip, { seq: reused.seq }), true);
  });

  it('never hands out reserved CIDRs', async () => {
    const a = await host('host-a', { pools: [{ name: 'r', cidr: '10.73.0.0/28', blockSize: 29, reserved: ['10.73.0.0/30', '10.73.0.8/29'] }] });
    const ips: string[] = [];
    for (let i = 0; i < 4; i++) ips.push((await a.allocate({ owner: `c${i}`, family: 4 })).ip);
    assert.deepEqual(ips.sort(), ['10.73.0.4', '10.73.0.5', '10.73.0.6', '10.73.0.7']);
    await rejectsWithIpamCode(a.allocate({ owner: 'c9', family: 4 }), IpamErrorCode.POOL_EXHAUSTED, 'r');
    // The fully reserved block is never created.
    assert.deepEqual([...(await blocks()).keys()], ['10.73.0.0/29']);
  });

  it('releases a host’s empty blocks with their affinities', async () => {
    const a = await host('host-a');
    for (let i = 0; i < 6; i++) await a.allocate({ owner: `a${i}`, family: 4 });
    assert.equal((await a.affineBlocks()).length, 2);
    for (let i = 0; i < 4; i++) await a.releaseOwner(`a${i}`);
    const released = await a.releaseEmptyBlocks();
    assert.equal(released.length, 1);
    assert.equal((await a.affineBlocks()).length, 1);
    assert.equal((await blocks()).size, 1);
    assert.equal(a.stats().blocksReleased, 1);
  });

  it('removes a host: affinities gone, empty blocks deleted, busy blocks orphaned and adoptable', async () => {
    const a = await host('host-a', { strictAffinity: true });
    const b = await host('host-b', { strictAffinity: true });
    for (let i = 0; i < 5; i++) await b.allocate({ owner: `b${i}`, family: 4 });
    await b.releaseOwner('b4');
    const cidrs = await b.affineBlocks();
    const bl = await blocks();
    const busy = cidrs.find((c) => bl.get(c)!.used > 0)!;
    const empty = cidrs.find((c) => bl.get(c)!.used === 0)!;
    await b.stop();
    const report = await removeHost(kv, 'host-b');
    assert.deepEqual(report.deletedBlocks, [empty]);
    assert.deepEqual(report.orphanedBlocks, [busy]);
    assert.equal((await kv.list(`${IPAM_AFFINITY_PREFIX}host-b/`)).kvs.length, 0);
    assert.equal((await blocks()).get(busy)?.affinity, null);
    // host-a fills the pool: the orphan is adopted once unclaimed blocks run out.
    for (let i = 0; i < 12; i++) await a.allocate({ owner: `a${i}`, family: 4 });
    await a.releaseOwner('b0').then((r) => assert.equal(r.length, 1, 'the dead host’s pods are still releasable by owner'));
    await a.allocate({ owner: 'a-last', family: 4 });
    assert.equal((await blocks()).get(busy)?.affinity, 'host-a');
    // With releaseAllocations, a removed host's addresses go too.
    const r2 = await removeHost(kv, 'host-a', { releaseAllocations: true });
    assert.equal(r2.releasedOwners.length, 13);
  });

  it('settles pending affinities left by a crash between the two phases', async () => {
    // host-a crashed after phase 2 for block .0/30 and before phase 2 for .4/30 (which host-b then took).
    await kv.put(blockKey('10.70.0.0/30'), JSON.stringify({ cidr: '10.70.0.0/30', pool: 'small', affinity: 'host-a', seq: 0, next: '0', reserved: [], allocs: {} }));
    await kv.put(blockKey('10.70.0.4/30'), JSON.stringify({ cidr: '10.70.0.4/30', pool: 'small', affinity: 'host-b', seq: 0, next: '0', reserved: [], allocs: {} }));
    await kv.put(affinityKey('host-a', '10.70.0.0/30'), JSON.stringify({ state: 'pending', pool: 'small', since: 1 }));
    await kv.put(affinityKey('host-a', '10.70.0.4/30'), JSON.stringify({ state: 'pending', pool: 'small', since: 1 }));
    const a = await host('host-a');
    assert.deepEqual(await a.affineBlocks(), ['10.70.0.0/30']);
    assert.equal(await kv.get(affinityKey('host-a', '10.70.0.4/30')), undefined);
    const x = await a.allocate({ owner: 'c', family: 4 });
    assert.equal(x.cidr, '10.70.0.0/30');
  });

  it('two hosts racing the two-phase claim for one block: exactly one wins, the loser keeps no affinity', async () => {
    const managers = ['race-a', 'race-b', 'race-c'].map((h) => new AffinityManager(new IpamStore(kv, h, newStats(), 30), Date.now));
    for (let round = 0; round < 20; round++) {
      const cidr = parseCidr(`10.75.${round}.0/30`);
      const text = `10.75.${round}.0/30`;
      const outcomes = await Promise.all(
        managers.map((m, i) => m.claim(text, 'race', () => newBlock(cidr, { pool: 'race', affinity: `race-${'abc'[i]}`, reserveSubnetEnds: false, reserved: [] }))),
      );
      assert.equal(outcomes.filter((o) => o === 'claimed').length, 1, `round ${round}: ${outcomes.join(',')}`);
      const winner = `race-${'abc'[outcomes.indexOf('claimed')]}`;
      assert.equal((await blocks()).get(text)?.affinity, winner);
      const affs = (await kv.list(IPAM_AFFINITY_PREFIX)).kvs.filter((k) => k.key.endsWith(`/${text}`));
      assert.deepEqual(affs.map((k) => k.key), [affinityKey(winner, text)]);
      assert.equal((JSON.parse(affs[0]!.value) as { state: string }).state, 'confirmed');
    }
  });

  it('keeps every block affine to one host while hosts allocate concurrently', async () => {
    const hosts = await Promise.all(['h1', 'h2', 'h3'].map((h) => host(h, { pools: [{ name: 'mid', cidr: '10.74.0.0/26', blockSize: 29 }] })));
    const results = await Promise.all(hosts.flatMap((h, i) => Array.from({ length: 20 }, (_, j) => h.allocate({ owner: `c${i}-${j}`, family: 4 }))));
    assert.equal(new Set(results.map((r) => r.ip)).size, 60);
    const pool = parseCidr('10.74.0.0/26');
    for (const r of results) assert.ok(prefixContainsIp(pool, parseIp(r.ip)));
    const affinities = (await kv.list(IPAM_AFFINITY_PREFIX)).kvs.map((k) => k.key.slice(IPAM_AFFINITY_PREFIX.length));
    const perBlock = new Map<string, string[]>();
    for (const k of affinities) {
      const [h, ...rest] = k.split('/');
      const cidr = rest.join('/');
      perBlock.set(cidr, [...(perBlock.get(cidr) ?? []), h!]);
    }
    for (const [cidr, hs] of perBlock) {
      assert.equal(hs.length, 1, `${cidr} affine to ${hs.join(', ')}`);
      assert.equal((await blocks()).get(cidr)?.affinity, hs[0]);
    }
  });
});
