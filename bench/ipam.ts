// IPAM throughput: allocations per second of tendril's allocators over the
// embedded store and over a real etcd, next to the reference host-local
// plugin exec'd directly the way a CNI runtime runs it — same run, same
// number of addresses, one allocation at a time (CNI ADDs arrive one by one).
// Runnable on its own: `node dist/bench/ipam.js [count]`.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { startEtcd } from '../test/support/etcdHarness.js';
import { openBackend } from '../src/kvstore/factory.js';
import type { Backend } from '../src/kvstore/types.js';
import { BlockAllocator } from '../src/ipam/blockAllocator.js';
import { HostScopeAllocator } from '../src/ipam/hostScope.js';
import type { Allocator } from '../src/ipam/types.js';
import { createLogger } from '../src/logging/logger.js';
import { type Summary, summarize } from './stats.js';

const HOST_LOCAL = process.env.HOST_LOCAL ?? '/usr/lib/cni/host-local';
const logger = createLogger('bench-ipam', 'error');

export interface IpamBenchRow {
  name: string;
  count: number;
  totalMs: number;
  perSecond: number;
  /** Per-allocation latency in ms. */
  latency: Summary;
}

export interface IpamBenchReport {
  count: number;
  rows: IpamBenchRow[];
}

async function timeEach(name: string, count: number, op: (i: number) => Promise<void>): Promise<IpamBenchRow> {
  const samples: number[] = [];
  const t0 = performance.now();
  for (let i = 0; i < count; i++) {
    const t = performance.now();
    await op(i);
    samples.push(performance.now() - t);
  }
  const totalMs = performance.now() - t0;
  return { name, count, totalMs, perSecond: (count * 1000) / totalMs, latency: summarize(samples) };
}

async function benchAllocator(name: string, count: number, make: () => Allocator): Promise<IpamBenchRow> {
  const a = make();
  await a.start();
  try {
    // Owners are cluster-wide handles: a fresh prefix per row, or a later row would only find earlier rows' addresses.
    const prefix = name.replace(/[^A-Za-z0-9]+/g, '-');
    return await timeEach(name, count, async (i) => {
      await a.allocate({ owner: `${prefix}-${i}`, family: 4 });
    });
  } finally {
    await a.stop();
  }
}

function execHostLocal(netconf: string, containerId: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(HOST_LOCAL, [], {
      env: { CNI_COMMAND: 'ADD', CNI_CONTAINERID: containerId, CNI_NETNS: '/var/run/netns/bench', CNI_IFNAME: 'eth0', CNI_PATH: '/usr/lib/cni' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`host-local exited ${code}: ${out}`))));
    child.stdin.end(netconf);
  });
}

export async function runIpamBench(count = 300): Promise<IpamBenchReport> {
  const dir = mkdtempSync(join(tmpdir(), 'tendril-bench-ipam-'));
  // Removes the temp dir also when etcd fails to start.
  const etcd = await startEtcd().catch((err: unknown) => {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  });
  const opened: Backend[] = [];
  const open = async (kind: 'embedded' | 'etcd', name: string): Promise<Backend> => {
    const b =
      kind === 'embedded'
        ? await openBackend({ kind, options: { 'embedded.path': join(dir, `${name}.db`) }, dataDir: dir, logger })
        : await openBackend({ kind, options: { 'etcd.endpoints': etcd.endpoint }, dataDir: dir, logger });
    opened.push(b);
    return b;
  };
  try {
    const rows: IpamBenchRow[] = [];
    const hostScope = (backend: Backend, cidr: string) => () => new HostScopeAllocator({ backend, host: 'bench', podCidrs: [{ cidr }], logger });
    const block = (backend: Backend, cidr: string) => () => new BlockAllocator({ backend, host: 'bench', pools: [{ cidr }], logger });
    // Default embedded durability (synchronous=full): every allocation is on disk when it returns, as host-local's file is.
    rows.push(await benchAllocator('tendril host-scope, embedded', count, hostScope(await open('embedded', 'hs'), '10.201.0.0/16')));
    rows.push(await benchAllocator('tendril block /26, embedded', count, block(await open('embedded', 'blk'), '10.202.0.0/16')));
    rows.push(await benchAllocator('tendril host-scope, etcd', count, hostScope(await open('etcd', 'hs'), '10.203.0.0/16')));
    rows.push(await benchAllocator('tendril block /26, etcd', count, block(await open('etcd', 'blk'), '10.204.0.0/16')));
    const netconf = JSON.stringify({
      cniVersion: '1.0.0',
      name: 'bench',
      type: 'bridge',
      ipam: { type: 'host-local', dataDir: join(dir, 'host-local'), ranges: [[{ subnet: '10.205.0.0/16' }]] },
    });
    rows.push(await timeEach('host-local exec (reference)', count, (i) => execHostLocal(netconf, `bench-${i}`)));
    return { count, rows };
  } finally {
    for (const b of opened) await b.close();
    await etcd.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
}

export function printIpamBench(r: IpamBenchReport): void {
  const ref = r.rows.find((x) => x.name.startsWith('host-local'));
  console.log(`IPAM: ${r.count} IPv4 allocations each, sequential (ms per allocation; ratio = allocations/s vs host-local)`);
  console.log(`  ${''.padEnd(32)} ${'alloc/s'.padStart(9)} ${'median'.padStart(8)} ${'p90'.padStart(8)} ${'vs host-local'.padStart(14)}`);
  for (const x of r.rows) {
    const ratio = ref === undefined ? '' : `${(x.perSecond / ref.perSecond).toFixed(2)}x`;
    console.log(
      `  ${x.name.padEnd(32)} ${x.perSecond.toFixed(0).padStart(9)} ${x.latency.median.toFixed(2).padStart(8)} ${x.latency.p90.toFixed(2).padStart(8)} ${ratio.padStart(14)}`,
    );
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const count = Number(process.argv[2] ?? 300);
  printIpamBench(await runIpamBench(count));
}
