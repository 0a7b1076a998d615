// `make bench` part: tendril-cni + agent against the reference bridge +
// host-local, each plugin exec'd directly the way a runtime does (and again
// through podman), interleaved call by call in one run: VERSION, ADD and DEL
// p50/p99, pods/s with many concurrent ADDs, and where the agent's ADD time goes.
import { mkdtemp, mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Podman } from '../test/support/runtimes/podman.js';
import { buildBusyboxRootfs } from '../test/support/runtimes/busybox.js';
import { exec, startBenchAgent, stopBenchAgent } from './benchProcess.js';
import type { ExecWorkerInput, ExecWorkerOutput } from './cniExecWorker.js';
import { percentile } from './stats.js';

const CNI = process.env.TENDRIL_CNI_BIN ?? fileURLToPath(new URL('../../bin/tendril-cni', import.meta.url));
const WORKER = fileURLToPath(new URL('./cniExecWorker.js', import.meta.url));
const PLUGINS = '/usr/lib/cni';

export interface CniExecOptions {
  pods: number;
  versionRuns: number;
  concurrent: number;
  podmanRuns: number;
}

export interface CniExecReport {
  options: CniExecOptions;
  direct: ExecWorkerOutput;
  /** The agent's own ADD steps (ms) of the sequential pods, from each endpoint's status. */
  agentSteps: Record<string, number[]>;
  podman: { tendril: number[]; reference: number[] };
}

export async function runCniExecBench(options: CniExecOptions): Promise<CniExecReport> {
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-exec-'));
  const node = `tdlbx${process.pid % 10000}`;
  const created: string[] = [];
  let agent: Awaited<ReturnType<typeof startBenchAgent>> | undefined;
  let podman: Podman | undefined;
  try {
    await exec(['ip', 'netns', 'add', node]);
    created.push(node);
    await exec(['ip', '-n', node, 'link', 'set', 'lo', 'up']);
    const podCount = Math.max(options.pods, options.concurrent);
    for (const side of ['t', 'r']) {
      for (let i = 0; i < podCount; i++) {
        await exec(['ip', 'netns', 'add', `${node}${side}${i}`]);
        created.push(`${node}${side}${i}`);
      }
    }
    agent = await startBenchAgent(node, join(scratch, 'state'), '10.244.0.0/23');
    const binDir = join(scratch, 'bin');
    await mkdir(binDir);
    await symlink(CNI, join(binDir, 'tendril-cni'));
    const tendrilConf = { cniVersion: '1.0.0', name: 'tdlbenchx', type: 'tendril-cni', socket: agent.socket };
    const bridgeConf = {
      cniVersion: '1.0.0',
      name: 'tdlbenchxref',
      type: 'bridge',
      bridge: 'tdlbrx',
      isGateway: true,
      ipMasq: false,
      ipam: { type: 'host-local', subnet: '10.245.0.0/23', dataDir: join(scratch, 'ipam') },
    };
    const input: ExecWorkerInput = {
      tendril: { path: CNI, conf: JSON.stringify(tendrilConf), netnsPrefix: `${node}t`, cniPath: `${binDir}:${PLUGINS}` },
      reference: { path: join(PLUGINS, 'bridge'), conf: JSON.stringify(bridgeConf), netnsPrefix: `${node}r`, cniPath: PLUGINS },
      pods: options.pods,
      versionRuns: options.versionRuns,
      concurrent: options.concurrent,
    };
    const inputFile = join(scratch, 'input.json');
    await writeFile(inputFile, JSON.stringify(input));
    const worker = async () => JSON.parse(await exec(['nsenter', `--net=/var/run/netns/${node}`, '--', process.execPath, WORKER, inputFile])) as ExecWorkerOutput;
    // Warm-up round (page cache, the bridge's creation, the agent's JIT), then the measured one.
    await worker();
    const direct = await worker();
    const agentSteps = await addStepTimings(agent.client, options.pods, `${node}t`);

    podman = await Podman.create({ nodeNetns: node, pluginDirs: [binDir, PLUGINS] });
    await podman.writeConflist('tdlbenchp', { cniVersion: '1.0.0', name: 'tdlbenchp', plugins: [{ type: 'tendril-cni', socket: agent.socket }] });
    await podman.writeConflist('tdlbenchpref', {
      cniVersion: '1.0.0',
      name: 'tdlbenchpref',
      plugins: [{ ...bridgeConf, name: undefined, cniVersion: undefined, bridge: 'tdlbrxp', ipam: { ...bridgeConf.ipam, subnet: '10.246.0.0/23' } }],
    });
    const rootfs = join(podman.root, 'rootfs', 'bench');
    await buildBusyboxRootfs(rootfs);
    const podmanRun = async (network: string) => {
      const t0 = performance.now();
      await podman!.podmanOk(['run', '--rm', '--network', network, '--rootfs', rootfs, '/bin/true']);
      return performance.now() - t0;
    };
    const podmanTimes = { tendril: [] as number[], reference: [] as number[] };
    await podmanRun('tdlbenchp');
    await podmanRun('tdlbenchpref');
    for (let i = 0; i < options.podmanRuns; i++) {
      const first = i % 2 === 0;
      if (first) podmanTimes.tendril.push(await podmanRun('tdlbenchp'));
      podmanTimes.reference.push(await podmanRun('tdlbenchpref'));
      if (!first) podmanTimes.tendril.push(await podmanRun('tdlbenchp'));
    }
    return { options, direct, agentSteps, podman: podmanTimes };
  } finally {
    if (podman) await podman.cleanup();
    if (agent) await stopBenchAgent(agent.process);
    for (const n of created.reverse()) await exec(['ip', 'netns', 'del', n]).catch(() => undefined);
    await rm(scratch, { recursive: true, force: true });
  }
}

/**
 * The agent's ADD time split by step, as it recorded them per endpoint:
 * another ADD of the same pods through the API, whose endpoints report it.
 */
async function addStepTimings(client: Awaited<ReturnType<typeof startBenchAgent>>['client'], pods: number, netnsPrefix: string): Promise<Record<string, number[]>> {
  const steps: Record<string, number[]> = {};
  const config = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlbenchx', type: 'tendril-cni' });
  for (let i = 0; i < pods; i++) {
    const req = { containerId: `${netnsPrefix}-api-${i}`, netns: `/var/run/netns/${netnsPrefix}${i}`, ifName: 'eth0', args: '', path: PLUGINS, config };
    await client.cni({ command: 'ADD', ...req });
    const ep = await client.getEndpoint(`container-id:${req.containerId}`);
    if (!ep.creationTimings) throw new Error('the agent reported no creation timings for the endpoint');
    for (const [step, ms] of Object.entries(ep.creationTimings)) (steps[step] ??= []).push(ms);
    await client.cni({ command: 'DEL', ...req });
  }
  return steps;
}

export function printCniExec(r: CniExecReport): void {
  const f = (x: number) => x.toFixed(1).padStart(8);
  const p50 = (xs: number[]) => percentile(xs, 0.5);
  const row = (name: string, t: number[], ref: number[]) =>
    `  ${name.padEnd(10)} ${f(p50(t))} ${f(percentile(t, 0.99))}   ${f(p50(ref))} ${f(percentile(ref, 0.99))}   ${(p50(t) / p50(ref)).toFixed(2).padStart(6)}x`;
  const { tendril: t, reference: ref } = r.direct;
  console.log(`\nCNI plugins exec'd directly as a runtime does, interleaved, ${r.options.pods} pods (ms)`);
  console.log(`  ${''.padEnd(10)} ${'tendril'.padStart(8)} ${''.padStart(8)}   ${'bridge'.padStart(8)} ${'+h-local'.padStart(8)}   ratio`);
  console.log(`  ${''.padEnd(10)} ${'p50'.padStart(8)} ${'p99'.padStart(8)}   ${'p50'.padStart(8)} ${'p99'.padStart(8)}   (p50)`);
  console.log(row('VERSION', t.version, ref.version));
  console.log(row('ADD', t.add, ref.add));
  console.log(row('DEL', t.del, ref.del));
  const pps = (wall: number) => (r.options.concurrent / (wall / 1000)).toFixed(1);
  console.log(
    `  pods/s with ${r.options.concurrent} concurrent ADDs: tendril ${pps(t.concurrentAddWall)}, reference ${pps(ref.concurrentAddWall)}` +
      ` (${(ref.concurrentAddWall / t.concurrentAddWall).toFixed(2)}x); DELs: tendril ${pps(t.concurrentDelWall)}, reference ${pps(ref.concurrentDelWall)}`,
  );
  console.log(`  the agent's ADD by step (p50 / p99 ms, ${r.options.pods} ADDs through the API):`);
  for (const [step, xs] of Object.entries(r.agentSteps)) console.log(`    ${step.padEnd(14)} ${f(p50(xs))} ${f(percentile(xs, 0.99))}`);
  const { tendril: pt, reference: pr } = r.podman;
  console.log(`  podman run --rm (CNI backend) ${r.options.podmanRuns}× each, p50: tendril ${f(p50(pt))}, bridge ${f(p50(pr))} (${(p50(pt) / p50(pr)).toFixed(2)}x)`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printCniExec(await runCniExecBench({ pods: Number(process.argv[2] ?? 30), versionRuns: 100, concurrent: 50, podmanRuns: 8 }));
}
