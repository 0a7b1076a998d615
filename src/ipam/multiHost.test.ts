import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { type EtcdHarness, startEtcd } from '../../test/support/etcdHarness.js';
import type { Backend } from '../kvstore/types.js';
import { formatIp, parsePrefix } from '../netip/index.js';
import { IPAM_AFFINITY_PREFIX, IPAM_BLOCKS_PREFIX, IPAM_HANDLES_PREFIX, hostHandlesPrefix } from './keys.js';
import { type BlockRecord, type AffinityRecord } from './records.js';
import { etcdBackend } from './testing/backends.js';

const WORKER = fileURLToPath(new URL('./testing/hostWorker.js', import.meta.url));
const HOSTS = 8;
const MAX_BLOCKS = 3;

interface Summary {
  host: string;
  strict: boolean;
  elapsedMs: number;
  allocs: number;
  releases: number;
  releasesByIp: number;
  borrowed: number;
  exhausted: number;
  noFreeBlock: number;
  duplicates: number;
  stats: { casRetries: number; casGiveUps: number; blocksClaimed: number };
  live: { owner: string; ip: string; cidr: string; borrowed: boolean }[];
}

interface Worker {
  ready: Promise<void>;
  go(): void;
  done: Promise<{ summary: Summary; dupLines: string[] }>;
}

function startWorker(args: string[]): Worker {
  const child = spawn(process.execPath, ['--enable-source-maps', WORKER, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  let markReady: () => void = () => undefined;
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    out += d;
    if (out.startsWith('ready\n')) markReady();
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => (err = (err + d).slice(-4000)));
  const done = new Promise<{ summary: Summary; dupLines: string[] }>((resolve, reject) => {
    child.once('exit', (code, signal) => {
      markReady();
      const lines = out.trim().split('\n');
      if (code !== 0) return reject(new Error(`worker ${args[1]} exited ${code ?? signal}: ${err}`));
      try {
        resolve({ summary: JSON.parse(lines.at(-1)!) as Summary, dupLines: lines.filter((l) => l.startsWith('DUPLICATE')) });
      } catch (e) {
        reject(new Error(`worker ${args[1]} printed no summary: ${out.slice(-500)} ${err} ${String(e)}`));
      }
    });
  });
  return { ready, go: () => child.stdin.end('go\n'), done };
}

/** Hosts 0..3 may borrow; hosts 4..7 run with strictAffinity and want more than their blocks hold. */
async function runHosts(endpoint: string, ops: number): Promise<Summary[]> {
  const workers = Array.from({ length: HOSTS }, (_, i) => {
    const strict = i >= HOSTS / 2;
    return startWorker([endpoint, `host-${i}`, String(ops), String(1000 + i), strict ? '1' : '0', String(MAX_BLOCKS), strict ? '60' : '0']);
  });
  await Promise.all(workers.map((w) => w.ready));
  for (const w of workers) w.go();
  const runs = await Promise.all(workers.map((w) => w.done));
  for (const r of runs) assert.deepEqual(r.dupLines, [], 'no address held twice at any moment');
  return runs.map((r) => r.summary);
}

/** Checks the store against what the hosts say they hold. */
async function verifyStore(kv: Backend, summaries: Summary[], maxBlocks: number): Promise<{ blocks: Map<string, BlockRecord> }> {
  const blocks = new Map<string, BlockRecord>();
  for (const k of (await kv.list(IPAM_BLOCKS_PREFIX)).kvs) {
    const b = JSON.parse(k.value) as BlockRecord;
    blocks.set(b.cidr, b);
  }
  // Zero duplicates, and the blocks hold exactly the hosts' live addresses.
  const live = summaries.flatMap((s) => s.live.map((l) => ({ ...l, host: s.host })));
  assert.equal(new Set(live.map((l) => l.ip)).size, live.length, 'duplicate live address');
  const stored: string[] = [];
  for (const b of blocks.values()) {
    const base = parsePrefix(b.cidr);
    for (const [ord, a] of Object.entries(b.allocs)) {
      stored.push(`${a.owner}=${formatIp({ family: base.family, bits: base.bits + BigInt(ord) })}`);
    }
  }
  assert.deepEqual(stored.sort(), live.map((l) => `${l.owner}=${l.ip}`).sort(), 'blocks == live allocations');
  assert.equal((await kv.list(IPAM_HANDLES_PREFIX)).kvs.length, live.length, 'one handle per live owner');
  for (const s of summaries) {
    const indexed = (await kv.list(hostHandlesPrefix(s.host))).kvs.map((k) => (JSON.parse(k.value) as { owner: string }).owner);
    assert.deepEqual(indexed.sort(), s.live.map((l) => l.owner).sort(), `${s.host}'s handle index`);
  }
  // Every block affine to exactly one host, which the block names too.
  const affine = new Map<string, string[]>();
  for (const k of (await kv.list(IPAM_AFFINITY_PREFIX)).kvs) {
    const rest = k.key.slice(IPAM_AFFINITY_PREFIX.length);
    const slash = rest.indexOf('/');
    const host = rest.slice(0, slash);
    const cidr = rest.slice(slash + 1);
    assert.equal((JSON.parse(k.value) as AffinityRecord).state, 'confirmed', `${k.key} left pending`);
    affine.set(cidr, [...(affine.get(cidr) ?? []), host]);
  }
  for (const [cidr, b] of blocks) {
    assert.deepEqual(affine.get(cidr), [b.affinity], `block ${cidr} affinity`);
  }
  assert.equal(affine.size, blocks.size, 'no affinity without a block');
  // Borrowed exactly when the address sits in another host's block.
  for (const l of live) assert.equal(l.borrowed, blocks.get(l.cidr)!.affinity !== l.host, `${l.ip} borrowed flag`);
  const perHost = new Map<string, number>();
  for (const b of blocks.values()) perHost.set(b.affinity!, (perHost.get(b.affinity!) ?? 0) + 1);
  for (const [h, n] of perHost) assert.ok(n <= maxBlocks, `${h} owns ${n} blocks > maxBlocksPerHost`);
  return { blocks };
}

describe('8 hosts in block mode against one etcd', () => {
  let etcd: EtcdHarness;
  let kv: Backend;
  before(async () => {
    etcd = await startEtcd();
    kv = (await etcdBackend(etcd.endpoint)).backend;
  });
  after(async () => {
    await kv?.close();
    await etcd?.destroy();
  });

  it('allocate and release concurrently: zero duplicates, one affinity per block, borrowing only when allowed, CAS retries reported', async (t) => {
    const summaries = await runHosts(etcd.endpoint, 250);
    const sum = (f: (s: Summary) => number, of = summaries) => of.reduce((n, s) => n + f(s), 0);
    const loose = summaries.filter((s) => !s.strict);
    const strict = summaries.filter((s) => s.strict);
    const total = sum((s) => s.allocs + s.releases + s.exhausted + s.noFreeBlock);
    t.diagnostic(
      `ops=${total} allocs=${sum((s) => s.allocs)} borrowed=${sum((s) => s.borrowed)} exhausted=${sum((s) => s.exhausted)} ` +
        `noFreeBlock=${sum((s) => s.noFreeBlock)} casRetries=${sum((s) => s.stats.casRetries)} giveUps=${sum((s) => s.stats.casGiveUps)} ` +
        `elapsedMs=${summaries.map((s) => s.elapsedMs).join(',')}`,
    );
    assert.ok(total >= 2000, `thousands of operations (${total})`);
    await verifyStore(kv, summaries, MAX_BLOCKS);
    // Borrowing only where allowed, and it did happen there.
    assert.ok(sum((s) => s.borrowed, loose) > 0, 'hosts past maxBlocksPerHost borrowed');
    for (const s of strict) {
      assert.equal(s.borrowed, 0, `${s.host} is strict`);
      assert.equal(s.exhausted, 0, 'strict affinity fails as IPAM_NO_FREE_BLOCK, not as exhaustion');
      assert.ok(s.noFreeBlock > 0, `${s.host} wanted more than ${MAX_BLOCKS} blocks hold and was refused cleanly`);
    }
    for (const s of loose) assert.equal(s.noFreeBlock, 0);
    // Contention is visible as counted retries, and no host gave up.
    assert.ok(sum((s) => s.stats.casRetries) > 0, 'contention showed up as counted CAS retries');
    assert.equal(sum((s) => s.stats.casGiveUps), 0);
  });
});
