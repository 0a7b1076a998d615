// `make bench` part: CNI ADD/DEL latency (p50/p99) and pods per second for
// 50 pods, tendril-cni + agent against the reference bridge + host-local,
// driven by the same libcni runtime in the same run, plus where tendril's time goes.
import { spawn } from 'node:child_process';
import { exec, startBenchAgent, stopBenchAgent } from './benchProcess.js';
import { percentile } from './stats.js';
import { mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

const CNI = fileURLToPath(new URL('../../bin/tendril-cni', import.meta.url));
const WORKER = fileURLToPath(new URL('./cniPodsWorker.js', import.meta.url));
const PLUGINS = '/usr/lib/cni';


interface WorkerResult {
  add: number[];
  del: number[];
  addWall: number;
  delWall: number;
  startup: number[];
}


export interface CniPodsReport {
  pods: number;
  tendril: { sequential: WorkerResult; concurrent: WorkerResult; agentAdd: number[]; agentDel: number[] };
  reference: { sequential: WorkerResult; concurrent: WorkerResult };
}

export async function runCniPodsBench(pods = 50): Promise<CniPodsReport> {
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-pods-'));
  const node = `tdlbp${process.pid % 10000}`;
  const created: string[] = [];
  let agentProc: ReturnType<typeof spawn> | undefined;
  try {
    await exec(['ip', 'netns', 'add', node]);
    created.push(node);
    await exec(['ip', '-n', node, 'link', 'set', 'lo', 'up']);
    for (const side of ['t', 'r']) {
      for (let i = 0; i < pods; i++) {
        await exec(['ip', 'netns', 'add', `${node}${side}${i}`]);
        created.push(`${node}${side}${i}`);
      }
    }
    const binDir = join(scratch, 'bin');
    await exec(['mkdir', '-p', binDir]);
    await symlink(CNI, join(binDir, 'tendril-cni'));
    const started = await startBenchAgent(node, join(scratch, 'state'), '10.242.0.0/23');
    agentProc = started.process;
    const { client, socket } = started;
    const tConf = join(scratch, 'tendril.conflist');
    await writeFile(tConf, JSON.stringify({ cniVersion: '1.0.0', name: 'tdlbench', plugins: [{ type: 'tendril-cni', socket }] }));
    const rConf = join(scratch, 'reference.conflist');
    await writeFile(
      rConf,
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'tdlbenchref',
        plugins: [{ type: 'bridge', bridge: 'tdlbrbench', isGateway: true, ipMasq: false, ipam: { type: 'host-local', subnet: '10.243.0.0/23', dataDir: join(scratch, 'ipam') } }],
      }),
    );
    const worker = async (conf: string, prefix: string, mode: string): Promise<WorkerResult> =>
      JSON.parse(await exec(['nsenter', `--net=/var/run/netns/${node}`, '--', process.execPath, WORKER, conf, join(scratch, `cache-${prefix}`), `${binDir}:${PLUGINS}`, prefix, String(pods), mode])) as WorkerResult;

    // Warm-up: page cache, the bridge's creation, the agent's JIT.
    await worker(tConf, `${node}t`, 'sequential');
    await worker(rConf, `${node}r`, 'sequential');
    const tSeq = await worker(tConf, `${node}t`, 'sequential');
    const rSeq = await worker(rConf, `${node}r`, 'sequential');
    const tCon = await worker(tConf, `${node}t`, 'concurrent');
    const rCon = await worker(rConf, `${node}r`, 'concurrent');

    // The agent's share: the same ADD/DEL sent straight to the API, without a plugin process.
    const agentAdd: number[] = [];
    const agentDel: number[] = [];
    const config = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlbench', type: 'tendril-cni' });
    for (let i = 0; i < pods; i++) {
      const req = { containerId: `${node}t-${i}`, netns: `/var/run/netns/${node}t${i}`, ifName: 'eth0', args: '', path: PLUGINS, config };
      let t0 = performance.now();
      await client.cni({ command: 'ADD', ...req });
      agentAdd.push(performance.now() - t0);
      t0 = performance.now();
      await client.cni({ command: 'DEL', ...req });
      agentDel.push(performance.now() - t0);
    }
    return { pods, tendril: { sequential: tSeq, concurrent: tCon, agentAdd, agentDel }, reference: { sequential: rSeq, concurrent: rCon } };
  } finally {
    if (agentProc) await stopBenchAgent(agentProc);
    for (const n of created.reverse()) await exec(['ip', 'netns', 'del', n]).catch(() => undefined);
    await rm(scratch, { recursive: true, force: true });
  }
}

export function printCniPods(r: CniPodsReport): void {
  const f = (x: number) => x.toFixed(1).padStart(8);
  const line = (name: string, xs: number[]) => `  ${name.padEnd(44)} ${f(percentile(xs, 0.5))} ${f(percentile(xs, 0.99))}`;
  console.log(`\nCNI through libcni, ${r.pods} pods, tendril-cni + agent vs reference bridge + host-local (ms)`);
  console.log(`  ${''.padEnd(44)} ${'p50'.padStart(8)} ${'p99'.padStart(8)}`);
  console.log(line('ADD  tendril (sequential)', r.tendril.sequential.add));
  console.log(line('ADD  reference (sequential)', r.reference.sequential.add));
  console.log(line('DEL  tendril (sequential)', r.tendril.sequential.del));
  console.log(line('DEL  reference (sequential)', r.reference.sequential.del));
  console.log(line('ADD  tendril (all concurrent)', r.tendril.concurrent.add));
  console.log(line('ADD  reference (all concurrent)', r.reference.concurrent.add));
  console.log(line('DEL  tendril (all concurrent)', r.tendril.concurrent.del));
  console.log(line('DEL  reference (all concurrent)', r.reference.concurrent.del));
  const pps = (w: WorkerResult) => (r.pods / (w.addWall / 1000)).toFixed(1);
  const dps = (w: WorkerResult) => r.pods / (w.delWall / 1000);
  console.log(`  pods/s ADD sequential: tendril ${pps(r.tendril.sequential)}, reference ${pps(r.reference.sequential)}; concurrent: tendril ${pps(r.tendril.concurrent)}, reference ${pps(r.reference.concurrent)}`);
  console.log(
    `  pods/s DEL sequential: tendril ${dps(r.tendril.sequential).toFixed(1)}, reference ${dps(r.reference.sequential).toFixed(1)}; concurrent: tendril ${dps(r.tendril.concurrent).toFixed(1)}, reference ${dps(r.reference.concurrent).toFixed(1)} (${(dps(r.tendril.concurrent) / dps(r.reference.concurrent)).toFixed(2)}x; goal ≥ 1)`,
  );
  const ratio = (a: number[], b: number[]) => (percentile(a, 0.5) / percentile(b, 0.5)).toFixed(2);
  console.log(`  ratio tendril/reference (p50): ADD ${ratio(r.tendril.sequential.add, r.reference.sequential.add)}x, DEL ${ratio(r.tendril.sequential.del, r.reference.sequential.del)}x`);
  console.log('  where tendril\'s ADD time goes (p50):');
  console.log(line('    plugin process start (tendril-cni VERSION)', r.tendril.sequential.startup));
  console.log(line('    agent work incl. API round trip (no plugin)', r.tendril.agentAdd));
  console.log(line('    reference bridge process start (VERSION)', r.reference.sequential.startup));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printCniPods(await runCniPodsBench(Number(process.argv[2] ?? 50)));
}
