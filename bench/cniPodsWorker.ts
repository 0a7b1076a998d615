// Runs inside a node namespace (started through nsenter by bench/cniPods.ts):
// ADDs then DELs N pods through libcni with the given conflist and prints the
// per-call latencies as JSON. The same runtime drives tendril-cni and the
// reference plugins, so the comparison is like for like.
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { CniRuntime, confListFromBytes } from '../src/libcni/index.js';

const [confPath, cacheDir, pluginDirs, podPrefix, countText, mode] = process.argv.slice(2);
if (!confPath || !cacheDir || !pluginDirs || !podPrefix || !countText || !mode) {
  console.error('usage: cniPodsWorker <conflist> <cache-dir> <plugin-dirs> <pod-netns-prefix> <count> <sequential|concurrent>');
  process.exit(2);
}
const { readFile } = await import('node:fs/promises');
const list = confListFromBytes(await readFile(confPath, 'utf8'));
const runtime = new CniRuntime({ pluginDirs: pluginDirs.split(':'), cacheDir });
const count = Number(countText);
const rt = (i: number) => ({ containerId: `${podPrefix}-${i}`, netns: `/var/run/netns/${podPrefix}${i}`, ifName: 'eth0' });

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

const add: number[] = [];
const del: number[] = [];
let addWall = 0;
let delWall = 0;
if (mode === 'sequential') {
  const t0 = performance.now();
  for (let i = 0; i < count; i++) add.push(await timed(() => runtime.addNetworkList(list, rt(i))));
  addWall = performance.now() - t0;
  const t1 = performance.now();
  for (let i = 0; i < count; i++) del.push(await timed(() => runtime.delNetworkList(list, rt(i))));
  delWall = performance.now() - t1;
} else {
  const t0 = performance.now();
  add.push(...(await Promise.all(Array.from({ length: count }, (_, i) => timed(() => runtime.addNetworkList(list, rt(i)))))));
  addWall = performance.now() - t0;
  const t1 = performance.now();
  del.push(...(await Promise.all(Array.from({ length: count }, (_, i) => timed(() => runtime.delNetworkList(list, rt(i)))))));
  delWall = performance.now() - t1;
}

// Process start-up of the first plugin in the list, measured with VERSION (no work at all).
const startup: number[] = [];
const plugin = list.plugins[0]!.network.type;
const pluginPath = await runtime['exec'].findInPath(plugin, pluginDirs.split(':'));
for (let i = 0; i < 10; i++) {
  startup.push(
    await timed(
      () =>
        new Promise<void>((resolve, reject) => {
          const c = spawn(pluginPath, [], { env: { ...process.env, CNI_COMMAND: 'VERSION' }, stdio: ['pipe', 'ignore', 'ignore'] });
          c.stdin.end('{"cniVersion":"1.0.0"}');
          c.on('error', reject);
          c.on('close', () => resolve());
        }),
    ),
  );
}
process.stdout.write(JSON.stringify({ add, del, addWall, delWall, startup }));
