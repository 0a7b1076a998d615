/**
 * kvstore throughput, both backends side by side in one run, same operations:
 *   node dist/bench/kvstore.js [seconds-per-cell=1] [rounds=3]
 * Rows: the embedded store in its default durable mode (WAL + synchronous=FULL)
 * and two alternatives that justify the default, then a real etcd started on
 * loopback with a temp data dir (same disk as the embedded store).
 * Columns: ops/s for sequential put, put with 32 in flight, sequential get,
 * and a CAS increment (get + compare-modRevision txn) sequentially and with 8
 * concurrent writers on one key (conflicts retried, counted once).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEtcd } from '../test/support/etcdHarness.js';
import { createLogger } from '../src/logging/logger.js';
import { openBackend } from '../src/kvstore/factory.js';
import { casIncrement } from '../src/kvstore/testing/casIncrement.js';
import type { Backend } from '../src/kvstore/types.js';

const cellSeconds = Number(process.argv[2] ?? '1');
const rounds = Number(process.argv[3] ?? '3');
const logger = createLogger('bench', 'warn');
const VALUE = JSON.stringify({ id: 12345, labels: ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=default'], node: 'node-1' });

/** Runs `op` with `inFlight` concurrent loops for cellSeconds; returns completed ops per second. */
async function rate(inFlight: number, op: (i: number) => Promise<unknown>): Promise<number> {
  const deadline = performance.now() + cellSeconds * 1000;
  let done = 0;
  let seq = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (performance.now() < deadline) {
        await op(seq++);
        done++;
      }
    }),
  );
  return done / ((performance.now() - start) / 1000);
}

interface Row {
  name: string;
  cells: number[];
}

interface Subject {
  name: string;
  kv: Backend;
  base: string;
}

/** One column: an operation measured on one backend. */
const COLUMNS: [string, (s: Subject) => Promise<number>][] = [
  ['put', (s) => rate(1, (i) => s.kv.put(`${s.base}p/${i % 1000}`, VALUE))],
  ['put x32', (s) => rate(32, (i) => s.kv.put(`${s.base}q/${i % 1000}`, VALUE))],
  ['get', (s) => rate(1, (i) => s.kv.get(`${s.base}p/${i % 1000}`))],
  ['CAS', (s) => rate(1, (i) => casIncrement(s.kv, `${s.base}c/${i % 100}`))],
  ['CAS x8 1 key', (s) => rate(8, () => casIncrement(s.kv, `${s.base}hot`))],
];

function median(xs: number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

/**
 * Interleaves the backends cell by cell and round by round, and reports the
 * median per cell: fsync-bound numbers swing with whatever else uses the disk,
 * and interleaving spreads that noise evenly instead of onto one backend.
 */
async function measureAll(subjects: Subject[]): Promise<Row[]> {
  const samples = subjects.map(() => COLUMNS.map(() => [] as number[]));
  for (let round = 0; round < rounds; round++) {
    for (const [c, [, op]] of COLUMNS.entries()) {
      for (const [b, subject] of subjects.entries()) samples[b]?.[c]?.push(await op(subject));
    }
  }
  return subjects.map((s, b) => ({ name: s.name, cells: (samples[b] as number[][]).map(median) }));
}

function printTable(rows: Row[]): void {
  const nameWidth = Math.max(...rows.map((r) => r.name.length), 'backend'.length);
  const fmt = (n: number): string => Math.round(n).toLocaleString('en-US');
  const names = COLUMNS.map(([c]) => c);
  const widths = names.map((c, i) => Math.max(c.length, ...rows.map((r) => fmt(r.cells[i] as number).length)));
  const line = (name: string, cells: string[]): string => [name.padEnd(nameWidth), ...cells.map((c, i) => c.padStart(widths[i] as number))].join(' | ');
  console.log(line('backend (ops/s)', names));
  console.log(['-'.repeat(nameWidth), ...widths.map((w) => '-'.repeat(w))].join('-|-'));
  for (const r of rows) console.log(line(r.name, r.cells.map(fmt)));
  const def = rows[0];
  const etcd = rows.find((r) => r.name.startsWith('etcd'));
  if (def && etcd) {
    console.log(`\nembedded (default) / etcd: ${names.map((c, i) => `${c} ${((def.cells[i] as number) / (etcd.cells[i] as number)).toFixed(1)}x`).join(', ')}`);
  }
}

async function main(): Promise<void> {
  const variants: [string, Record<string, string>][] = [
    ['embedded wal+full (default)', {}],
    ['embedded wal+normal', { 'embedded.synchronous': 'normal' }],
    ['embedded delete+full', { 'embedded.journal': 'delete' }],
  ];
  const dirs: string[] = [];
  const subjects: Subject[] = [];
  const etcd = await startEtcd();
  try {
    for (const [name, options] of variants) {
      const dir = mkdtempSync(join(tmpdir(), 'tendril-bench-'));
      dirs.push(dir);
      subjects.push({ name, kv: await openBackend({ kind: 'embedded', options, dataDir: dir, logger }), base: 'bench/' });
    }
    const kv = await openBackend({ kind: 'etcd', options: { 'etcd.endpoints': etcd.endpoint }, dataDir: '/nonexistent', logger });
    subjects.push({ name: 'etcd 3.4 (1 member, loopback)', kv, base: 'bench/' });
    const rows = await measureAll(subjects);
    console.log(`kvstore bench: median of ${rounds} interleaved rounds, ${cellSeconds} s per cell, value ${VALUE.length} bytes, data in ${tmpdir()}\n`);
    printTable(rows);
  } finally {
    for (const s of subjects) await s.kv.close();
    await etcd.destroy();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
}

await main();
