// ADD/DEL latency of `bin/tendril cni` (a full libcni runtime in a fresh Node
// process) against exec'ing the reference bridge plugin directly with the same
// config, side by side in one run: the runtime's own overhead.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { exec } from './benchProcess.js';
import { summarize, type Summary } from './stats.js';

const TENDRIL = fileURLToPath(new URL('../../bin/tendril', import.meta.url));
const PLUGINS = '/usr/lib/cni';


async function timed(fn: () => Promise<void>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

export interface CniLatencyReport {
  iterations: number;
  tendril: { add: Summary; del: Summary };
  direct: { add: Summary; del: Summary };
}

export async function runCniLatencyBench(iterations = 20): Promise<CniLatencyReport> {
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-cni-'));
  const node = `tdlbench${process.pid}`;
  const pod = `${node}p`;
  const nodeEnter = ['nsenter', `--net=/var/run/netns/${node}`, '--'];
  try {
    await exec(['ip', 'netns', 'add', node], process.env);
    await exec(['ip', 'netns', 'add', pod], process.env);
    const plugin = { type: 'bridge', bridge: 'tdlbrbench', isGateway: true, ipMasq: false, ipam: { type: 'host-local', subnet: '10.218.0.0/24', dataDir: join(scratch, 'ipam') } };
    await writeFile(join(scratch, '10-tdlbench.conflist'), JSON.stringify({ cniVersion: '1.0.0', name: 'tdlbench', plugins: [plugin] }));
    const cliEnv = { ...process.env, NETCONFPATH: scratch, CNI_PATH: PLUGINS, CNI_CONTAINERID: 'tdlbench' };
    const cli = (verb: string) => exec([...nodeEnter, TENDRIL, 'cni', verb, 'tdlbench', `/var/run/netns/${pod}`, '--cache-dir', join(scratch, 'cache')], cliEnv).then(() => undefined);
    const directConf = JSON.stringify({ ...plugin, cniVersion: '1.0.0', name: 'tdlbench' });
    const directEnv = (verb: string) => ({
      ...process.env,
      CNI_COMMAND: verb,
      CNI_CONTAINERID: 'tdlbench',
      CNI_NETNS: `/var/run/netns/${pod}`,
      CNI_IFNAME: 'eth0',
      CNI_PATH: PLUGINS,
    });
    const direct = (verb: string) => exec([...nodeEnter, join(PLUGINS, 'bridge')], directEnv(verb), directConf).then(() => undefined);

    const samples = { tAdd: [] as number[], tDel: [] as number[], dAdd: [] as number[], dDel: [] as number[] };
    // Warm-up pays the page cache for node, the plugins and the bridge's creation.
    await cli('add');
    await cli('del');
    for (let i = 0; i < iterations; i++) {
      // Interleaved so that drift on the machine hits both sides alike.
      samples.tAdd.push(await timed(() => cli('add')));
      samples.tDel.push(await timed(() => cli('del')));
      samples.dAdd.push(await timed(() => direct('ADD')));
      samples.dDel.push(await timed(() => direct('DEL')));
    }
    return {
      iterations,
      tendril: { add: summarize(samples.tAdd), del: summarize(samples.tDel) },
      direct: { add: summarize(samples.dAdd), del: summarize(samples.dDel) },
    };
  } finally {
    await exec(['ip', 'netns', 'del', pod], process.env).catch(() => undefined);
    await exec(['ip', 'netns', 'del', node], process.env).catch(() => undefined);
    await rm(scratch, { recursive: true, force: true });
  }
}

export function printCniLatency(r: CniLatencyReport): void {
  const row = (name: string, s: Summary) => `  ${name.padEnd(34)} ${s.median.toFixed(1).padStart(8)} ${s.p90.toFixed(1).padStart(8)}`;
  console.log(`\nCNI ADD/DEL latency, bridge + host-local, ${r.iterations} iterations (ms)`);
  console.log(`  ${''.padEnd(34)} ${'median'.padStart(8)} ${'p90'.padStart(8)}`);
  console.log(row('ADD  tendril cni (libcni runtime)', r.tendril.add));
  console.log(row('ADD  bridge plugin exec\'d directly', r.direct.add));
  console.log(row('DEL  tendril cni (libcni runtime)', r.tendril.del));
  console.log(row('DEL  bridge plugin exec\'d directly', r.direct.del));
  console.log(`  runtime overhead ratio (median): ADD ${(r.tendril.add.median / r.direct.add.median).toFixed(2)}x, DEL ${(r.tendril.del.median / r.direct.del.median).toFixed(2)}x`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printCniLatency(await runCniLatencyBench(Number(process.argv[2] ?? 20)));
}
