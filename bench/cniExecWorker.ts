// Runs inside a node namespace (started once through nsenter by bench/cniExec.ts)
// and execs CNI plugins directly, the way a runtime does: environment, netconf
// on stdin, the result on stdout. tendril-cni and the reference bridge plugin
// are interleaved call by call, so both see the same machine load.
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';

export interface PluginUnderTest {
  /** Absolute path of the plugin binary. */
  path: string;
  /** The netconf given on stdin. */
  conf: string;
  /** Prefix of the pods' netns names (`<prefix><i>` under /var/run/netns). */
  netnsPrefix: string;
  cniPath: string;
}

export interface ExecWorkerInput {
  tendril: PluginUnderTest;
  reference: PluginUnderTest;
  pods: number;
  versionRuns: number;
  /** Pods ADDed all at once, per plugin, for pods/s. */
  concurrent: number;
}

export interface PluginTimings {
  version: number[];
  add: number[];
  del: number[];
  /** Wall time of `concurrent` ADDs started together. */
  concurrentAddWall: number;
  concurrentDelWall: number;
}

export interface ExecWorkerOutput {
  tendril: PluginTimings;
  reference: PluginTimings;
}

function execPlugin(p: PluginUnderTest, command: string, pod: number): Promise<number> {
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    CNI_COMMAND: command,
    CNI_CONTAINERID: `${p.netnsPrefix}-${pod}`,
    CNI_NETNS: `/var/run/netns/${p.netnsPrefix}${pod}`,
    CNI_IFNAME: 'eth0',
    CNI_PATH: p.cniPath,
  };
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const c = spawn(p.path, [], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    c.stdout.on('data', (d: Buffer) => (out += d.toString()));
    c.stderr.on('data', (d: Buffer) => (err += d.toString()));
    c.stdin.on('error', () => undefined);
    c.stdin.end(p.conf);
    c.on('error', reject);
    c.on('close', (code) => {
      const ms = performance.now() - t0;
      if (code === 0) resolve(ms);
      else reject(new Error(`${p.path} ${command} pod ${pod} exited ${code}: ${out}${err}`));
    });
  });
}

const input = JSON.parse(await readFile(process.argv[2]!, 'utf8')) as ExecWorkerInput;
const subjects = [input.tendril, input.reference] as const;
const empty = (): PluginTimings => ({ version: [], add: [], del: [], concurrentAddWall: 0, concurrentDelWall: 0 });
const out = { tendril: empty(), reference: empty() };
const timingsOf = (i: number) => (i === 0 ? out.tendril : out.reference);

// Alternate which plugin goes first, so neither always follows the other.
const order = (round: number) => (round % 2 === 0 ? [0, 1] : [1, 0]);

for (let r = 0; r < input.versionRuns; r++) {
  for (const i of order(r)) timingsOf(i).version.push(await execPlugin(subjects[i]!, 'VERSION', 0));
}
for (let pod = 0; pod < input.pods; pod++) {
  for (const i of order(pod)) timingsOf(i).add.push(await execPlugin(subjects[i]!, 'ADD', pod));
}
for (let pod = 0; pod < input.pods; pod++) {
  for (const i of order(pod)) timingsOf(i).del.push(await execPlugin(subjects[i]!, 'DEL', pod));
}
for (const i of [0, 1]) {
  const s = subjects[i]!;
  const pods = Array.from({ length: input.concurrent }, (_, k) => k);
  let t0 = performance.now();
  await Promise.all(pods.map((k) => execPlugin(s, 'ADD', k)));
  timingsOf(i).concurrentAddWall = performance.now() - t0;
  t0 = performance.now();
  await Promise.all(pods.map((k) => execPlugin(s, 'DEL', k)));
  timingsOf(i).concurrentDelWall = performance.now() - t0;
}
process.stdout.write(JSON.stringify(out));
