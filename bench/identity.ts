/**
 * Identity allocation throughput and ipcache propagation latency, embedded
 * store and a real etcd side by side in one run:
 *   node dist/bench/identity.js [label-sets-per-cell]
 * Identity rows: allocations per second of new label sets (each one a kvstore
 * CAS transaction creating master, index and usage keys) with 1 and 32 in
 * flight; three nodes racing for the same label sets (every node must end
 * with the same number); and repeats answered by the local ref-counted cache.
 * ipcache rows: time from node A's local upsert to node B's ipcache listener,
 * one address at a time and during a burst of 32 in flight (p50/p99).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { startEtcd } from '../test/support/etcdHarness.js';
import { createLogger } from '../src/logging/logger.js';
import { openBackend } from '../src/kvstore/factory.js';
import type { Backend } from '../src/kvstore/types.js';
import { LabelSet } from '../src/labels/index.js';
import { IdentityAllocator, NodeLease } from '../src/identity/index.js';
import { IPCache, KvstoreIPCacheSync } from '../src/ipcache/index.js';

const logger = createLogger('bench', 'warn');

export interface IdentityBenchRow {
  backend: string;
  /** New label sets per second, one allocation in flight. */
  newSerial: number;
  /** New label sets per second, 32 in flight. */
  newParallel: number;
  /** Label sets per second agreed by three nodes racing for each. */
  threeNodeRace: number;
  /** Lost CAS transactions during the race. */
  raceConflicts: number;
  /** Repeat allocations per second served from the local cache. */
  cached: number;
  /** ipcache A→B propagation, one at a time: p50/p99 ms. */
  propSerial: { p50: number; p99: number; n: number };
  /** ipcache A→B propagation during a 32-in-flight burst: p50/p99 ms. */
  propBurst: { p50: number; p99: number; n: number };
}

export interface IdentityBenchReport {
  labelSetsPerCell: number;
  rows: IdentityBenchRow[];
}

function percentile(samples: number[], q: number): number {
  const s = [...samples].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

interface Store {
  name: string;
  connect(): Promise<Backend>;
  close(): Promise<void>;
}

async function embedded(): Promise<Store> {
  const dir = mkdtempSync(join(tmpdir(), 'tendril-bench-id-'));
  const kv = await openBackend({ kind: 'embedded', options: {}, dataDir: dir, logger });
  // One embedded store per host: its "nodes" share the one opener.
  const shared = new Proxy(kv, { get: (t, p) => (p === 'close' ? async () => undefined : (Reflect.get(t, p) as unknown)) }) as Backend;
  return {
    name: 'embedded (wal+full)',
    connect: async () => shared,
    close: async () => {
      await kv.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function etcd(): Promise<Store> {
  const server = await startEtcd();
  const clients: Backend[] = [];
  return {
    name: 'etcd (1 member, loopback)',
    connect: async () => {
      const b = await openBackend({ kind: 'etcd', options: { 'etcd.endpoints': server.endpoint }, dataDir: '/nonexistent', logger });
      clients.push(b);
      return b;
    },
    close: async () => {
      for (const c of clients) await c.close();
      await server.destroy();
    },
  };
}

interface BenchNode {
  allocator: IdentityAllocator;
  lease: NodeLease;
  ipcache: IPCache;
  sync: KvstoreIPCacheSync;
}

async function startNode(store: Store, name: string, ip: string, run: string): Promise<BenchNode> {
  const backend = await store.connect();
  const lease = new NodeLease(backend, { ttlSeconds: 30, logger });
  const allocator = new IdentityAllocator({ backend, nodeName: name, lease, keyPrefix: `bench/${run}/identities/`, gcIntervalMs: 0, logger });
  await allocator.start();
  const ipcache = new IPCache({ logger });
  const sync = new KvstoreIPCacheSync({ backend, ipcache, nodeName: name, nodeIP: ip, lease, keyPrefix: `bench/${run}/ip/`, logger });
  await sync.start();
  return { allocator, lease, ipcache, sync };
}

async function stopNode(n: BenchNode): Promise<void> {
  await n.sync.stop();
  await n.allocator.close();
  await n.lease.stop({ revoke: true });
}

const labelsFor = (tag: string, i: number): LabelSet =>
  LabelSet.parse([`k8s:app=${tag}-${i}`, 'k8s:io.kubernetes.pod.namespace=bench', 'k8s:tier=backend']);

async function perSecond(count: number, inFlight: number, op: (i: number) => Promise<unknown>): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      for (let i = next++; i < count; i = next++) await op(i);
    }),
  );
  return count / ((performance.now() - t0) / 1000);
}

/** Upserts on A and times each address's arrival at B's ipcache listener. */
async function propagation(a: BenchNode, b: BenchNode, count: number, inFlight: number, base: number): Promise<number[]> {
  const waiting = new Map<string, (t: number) => void>();
  const unsubscribe = b.ipcache.subscribe({
    onUpsert: (e) => waiting.get(e.prefix)?.(performance.now()),
    onDelete: () => undefined,
  });
  const delays: number[] = [];
  try {
    await perSecond(count, inFlight, async (i) => {
      const ip = `10.${100 + base}.${Math.floor(i / 250)}.${(i % 250) + 1}`;
      const arrived = new Promise<number>((resolve) => waiting.set(`${ip}/32`, resolve));
      const t0 = performance.now();
      a.ipcache.upsert(ip, { source: 'local', owner: `endpoint:${i}`, identity: 300 });
      delays.push((await arrived) - t0);
      waiting.delete(`${ip}/32`);
    });
  } finally {
    unsubscribe();
  }
  return delays;
}

async function measure(store: Store, count: number): Promise<IdentityBenchRow> {
  const run = `${Date.now()}`;
  const [a, b, c] = [
    await startNode(store, 'bench-a', '192.168.50.1', run),
    await startNode(store, 'bench-b', '192.168.50.2', run),
    await startNode(store, 'bench-c', '192.168.50.3', run),
  ];
  try {
    const newSerial = await perSecond(count, 1, (i) => a.allocator.allocate(labelsFor('serial', i)));
    const newParallel = await perSecond(count, 32, (i) => a.allocator.allocate(labelsFor('parallel', i)));
    const before = a.allocator.conflicts + b.allocator.conflicts + c.allocator.conflicts;
    const t0 = performance.now();
    const results = await Promise.all(
      [a, b, c].map((n) => Promise.all(Array.from({ length: count }, (_, i) => n.allocator.allocate(labelsFor('race', i))))),
    );
    const threeNodeRace = count / ((performance.now() - t0) / 1000);
    for (let i = 0; i < count; i++) {
      const ids = new Set(results.map((r) => r[i]!.identity.id));
      if (ids.size !== 1) throw new Error(`race: label set ${i} got ${[...ids].join(', ')}`);
    }
    const raceConflicts = a.allocator.conflicts + b.allocator.conflicts + c.allocator.conflicts - before;
    const cachedSet = labelsFor('serial', 0);
    const cached = await perSecond(count * 100, 1, () => a.allocator.allocate(cachedSet));
    const serial = await propagation(a, b, Math.min(count, 200), 1, 0);
    const burst = await propagation(a, b, count, 32, 1);
    return {
      backend: store.name,
      newSerial,
      newParallel,
      threeNodeRace,
      raceConflicts,
      cached,
      propSerial: { p50: percentile(serial, 0.5), p99: percentile(serial, 0.99), n: serial.length },
      propBurst: { p50: percentile(burst, 0.5), p99: percentile(burst, 0.99), n: burst.length },
    };
  } finally {
    for (const n of [a, b, c]) await stopNode(n);
  }
}

export async function runIdentityBench(labelSetsPerCell = 500): Promise<IdentityBenchReport> {
  const rows: IdentityBenchRow[] = [];
  for (const open of [embedded, etcd]) {
    const store = await open();
    try {
      rows.push(await measure(store, labelSetsPerCell));
    } finally {
      await store.close();
    }
  }
  return { labelSetsPerCell, rows };
}

export function printIdentityBench(report: IdentityBenchReport): void {
  const fmt = (n: number) => (n >= 100 ? Math.round(n).toLocaleString('en-US') : n.toFixed(1));
  const ms = (p: { p50: number; p99: number }) => `${p.p50.toFixed(2)} / ${p.p99.toFixed(2)}`;
  const header = ['backend', 'new 1-in-flight/s', 'new 32-in-flight/s', '3-node race sets/s (conflicts)', 'cached/s', 'ipcache A→B ms p50/p99', 'burst 32 ms p50/p99'];
  const rows = report.rows.map((r) => [
    r.backend,
    fmt(r.newSerial),
    fmt(r.newParallel),
    `${fmt(r.threeNodeRace)} (${r.raceConflicts})`,
    fmt(r.cached),
    ms(r.propSerial),
    ms(r.propBurst),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ');
  console.log(`identity bench: ${report.labelSetsPerCell} label sets per cell, three nodes per backend\n`);
  console.log(line(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('-|-'));
  for (const r of rows) console.log(line(r));
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  printIdentityBench(await runIdentityBench(Number(process.argv[2] ?? '500')));
}
