// `make bench` part: the agent's ADD and DEL of a dual-stack pod (an IPv4
// and an IPv6 pod CIDR: two allocations, two addresses and two default
// routes in the pod, two host routes) against a single-stack one, on the
// eBPF datapath. Two agents run side by side in node namespaces of their
// own; each pod namespace is added to one, deleted, then added to the
// other, interleaved, so drift on the machine hits both alike. Sent straight
// to the agents' APIs: a plugin process would add the same cost to both.
import { performance } from 'node:perf_hooks';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { spawn } from 'node:child_process';
import { exec, startBenchAgent, stopBenchAgent } from './benchProcess.js';
import { percentile } from './stats.js';

export interface CniDualStackReport {
  pods: number;
  single: Side;
  dual: Side;
}

interface Side {
  add: number[];
  del: number[];
  /** The agent's own step timings of each ADD (the endpoint's creationTimings), by step. */
  steps: Record<string, number[]>;
}

export async function runCniDualStackBench(pods = 50): Promise<CniDualStackReport> {
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-ds-'));
  const base = `tdlbds${process.pid % 10000}`;
  const created: string[] = [];
  const agents: Array<ReturnType<typeof spawn>> = [];
  try {
    for (const n of [`${base}s`, `${base}d`]) {
      await exec(['ip', 'netns', 'add', n]);
      created.push(n);
      await exec(['ip', '-n', n, 'link', 'set', 'lo', 'up']);
    }
    for (let i = 0; i < pods; i++) {
      await exec(['ip', 'netns', 'add', `${base}p${i}`]);
      created.push(`${base}p${i}`);
    }
    const single = await startBenchAgent(`${base}s`, join(scratch, 'single'), '10.244.0.0/23', ['--routing-mode', 'native']);
    agents.push(single.process);
    const dual = await startBenchAgent(`${base}d`, join(scratch, 'dual'), '10.245.0.0/23,fd00:245::/112', ['--routing-mode', 'native']);
    agents.push(dual.process);
    const config = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlbenchds', type: 'tendril-cni' });
    const report: CniDualStackReport = { pods, single: { add: [], del: [], steps: {} }, dual: { add: [], del: [], steps: {} } };
    const round = async (record: boolean) => {
      for (let i = 0; i < pods; i++) {
        const req = { containerId: `${base}-${i}`, netns: `/var/run/netns/${base}p${i}`, ifName: 'eth0', args: '', path: '/usr/lib/cni', config };
        // Which goes first alternates, so neither always runs right after the other's DEL.
        const order = i % 2 === 0 ? ([['single', single.client], ['dual', dual.client]] as const) : ([['dual', dual.client], ['single', single.client]] as const);
        for (const [kind, client] of order) {
          let t0 = performance.now();
          await client.cni({ command: 'ADD', ...req });
          const add = performance.now() - t0;
          // Read outside the timed ADD and DEL.
          const timings = record ? ((await client.getEndpoint(`container-id:${req.containerId}`)) as { creationTimings?: Record<string, number> }).creationTimings : undefined;
          for (const [step, ms] of Object.entries(timings ?? {})) (report[kind].steps[step] ??= []).push(ms);
          t0 = performance.now();
          await client.cni({ command: 'DEL', ...req });
          const del = performance.now() - t0;
          if (record) {
            report[kind].add.push(add);
            report[kind].del.push(del);
          }
        }
      }
    };
    // Warm-up: the agents' JIT, the pinned programs' first attach.
    await round(false);
    await round(true);
    return report;
  } finally {
    for (const p of agents) await stopBenchAgent(p);
    for (const n of created.reverse()) await exec(['ip', 'netns', 'del', n]).catch(() => undefined);
    await rm(scratch, { recursive: true, force: true });
  }
}

export function printCniDualStack(r: CniDualStackReport): void {
  const f = (x: number) => x.toFixed(2).padStart(8);
  const line = (name: string, xs: number[]) => `  ${name.padEnd(34)} ${f(percentile(xs, 0.5))} ${f(percentile(xs, 0.9))} ${f(percentile(xs, 0.99))}`;
  console.log(`\nAgent ADD/DEL of a dual-stack pod vs a single-stack one, eBPF datapath, ${r.pods} pods interleaved (ms)`);
  console.log(`  ${''.padEnd(34)} ${'p50'.padStart(8)} ${'p90'.padStart(8)} ${'p99'.padStart(8)}`);
  console.log(line('ADD  single-stack (IPv4)', r.single.add));
  console.log(line('ADD  dual-stack (IPv4 + IPv6)', r.dual.add));
  console.log(line('DEL  single-stack (IPv4)', r.single.del));
  console.log(line('DEL  dual-stack (IPv4 + IPv6)', r.dual.del));
  const ratio = (a: number[], b: number[]) => (percentile(a, 0.5) / percentile(b, 0.5)).toFixed(2);
  console.log(`  ratio dual/single (p50): ADD ${ratio(r.dual.add, r.single.add)}x, DEL ${ratio(r.dual.del, r.single.del)}x`);
  console.log('  the agent\'s ADD steps (p50, single / dual):');
  for (const step of Object.keys(r.dual.steps)) {
    const one = r.single.steps[step] ?? [];
    console.log(`    ${step.padEnd(32)} ${one.length > 0 ? f(percentile(one, 0.5)) : '       -'} ${f(percentile(r.dual.steps[step]!, 0.5))}`);
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printCniDualStack(await runCniDualStackBench(Number(process.argv[2] ?? 50)));
}
