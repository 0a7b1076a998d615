/**
 * kvstore throughput, both backends side by side in one run, same operations:
 *   node dist/bench/kvstore.js [seconds-per-cell]
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

const cellSeconds = Number(process.argv[2] ?? '2');
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

const COLUMNS = ['put', 'put x32', 'get', 'CAS', 'CAS x8 1 key'];

async function measure(name: string, kv: Backend): Promise<Row> {
  const base = `bench/${Date.now()}/`;
  const put = await rate(1, (i) => kv.put(`${base}p/${i % 1000}`, VALUE));
  const putPar = await rate(32, (i) => kv.put(`${base}q/${i % 1000}`, VALUE));
  const get = await rate(1, (i) => kv.get(`${base}p/${i % 1000}`));
  const cas = await rate(1, (i) => casIncrement(kv, `${base}c/${i % 100}`));
  const casHot = await rate(8, () => casIncrement(kv, `${base}hot`));
  return { name, cells: [put, putPar, get, cas, casHot] };
}

function printTable(rows: Row[]): void {
  const nameWidth = Math.max(...rows.map((r) => r.name.length), 'backend'.length);
  const fmt = (n: number): string => Math.round(n).toLocaleString('en-US');
  const widths = COLUMNS.map((c, i) => Math.max(c.length, ...rows.map((r) => fmt(r.cells[i] as number).length)));
  const line = (name: string, cells: string[]): string => [name.padEnd(nameWidth), ...cells.map((c, i) => c.padStart(widths[i] as number))].join(' | ');
  console.log(line('backend (ops/s)', COLUMNS));
  console.log(['-'.repeat(nameWidth), ...widths.map((w) => '-'.repeat(w))].join('-|-'));
  for (const r of rows) console.log(line(r.name, r.cells.map(fmt)));
  const def = rows[0];
  const etcd = rows.find((r) => r.name.startsWith('etcd'));
  if (def && etcd) {
    console.log(`\nembedded (default) / etcd: ${COLUMNS.map((c, i) => `${c} ${((def.cells[i] as number) / (etcd.cells[i] as number)).toFixed(1)}x`).join(', ')}`);
  }
}

async function main(): Promise<void> {
  const rows: Row[] = [];
  const variants: [string, Record<string, string>][] = [
    ['embedded wal+full (default)', {}],
    ['embedded wal+normal', { 'embedded.synchronous': 'normal' }],
    ['embedded delete+full', { 'embedded.journal': 'delete' }],
  ];
  for (const [name, options] of variants) {
    const dir = mkdtempSync(join(tmpdir(), 'tendril-bench-'));
    try {
      const kv = await openBackend({ kind: 'embedded', options, stateDir: dir, logger });
      try {
        rows.push(await measure(name, kv));
      } finally {
        await kv.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const etcd = await startEtcd();
  try {
    const kv = await openBackend({ kind: 'etcd', options: { 'etcd.endpoints': etcd.endpoint }, stateDir: '/nonexistent', logger });
    try {
      rows.push(await measure('etcd 3.4 (1 member, loopback)', kv));
    } finally {
      await kv.close();
    }
  } finally {
    await etcd.destroy();
  }
  console.log(`kvstore bench: ${cellSeconds} s per cell, value ${VALUE.length} bytes, tmpdir ${tmpdir()}\n`);
  printTable(rows);
}

await main();
