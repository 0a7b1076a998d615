// ADD, DEL and CHECK spawn no process: the agent's execve()s are traced with
// strace (attached to every thread, following forks) during a burst of CNI
// calls, and none may appear. A control run first proves the same tracing
// sees a Node process's child execs, so an empty trace means something.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Result100 } from '../../cni/index.js';
import { confListFromBytes, type NetworkConfigList, type RuntimeConf } from '../../libcni/index.js';
import { type SingleNode, startSingleNode } from '../../../test/support/agentHarness.js';
import { NetnsPool } from '../../../test/support/netns.js';
import { requireRoot } from '../../../test/support/root.js';

requireRoot('the no-child-process test');

const PODS = 8;

/** Whether every thread of `pid` has a tracer attached. */
async function fullyTraced(pid: number): Promise<boolean> {
  const tasks = await readdir(`/proc/${pid}/task`);
  for (const tid of tasks) {
    const status = await readFile(`/proc/${pid}/task/${tid}/status`, 'utf8').catch(() => '');
    const tracer = /^TracerPid:\s+(\d+)/m.exec(status)?.[1];
    if (tracer === undefined || tracer === '0') return false;
  }
  return true;
}

/**
 * strace attached to a running process: every thread (-p with -f), every
 * child it forks (-f), execve and execveat only. stop() detaches and
 * returns the trace's exec lines.
 */
class ExecTrace {
  private constructor(
    private readonly child: ChildProcess,
    private readonly out: string,
    private readonly exited: Promise<number | null>,
  ) {}

  static async attach(pid: number, dir: string): Promise<ExecTrace> {
    const out = join(dir, `strace-${pid}.txt`);
    const child = spawn('strace', ['-f', '-qq', '-e', 'trace=execve,execveat', '-e', 'signal=none', '-o', out, '-p', String(pid)], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const deadline = Date.now() + 10_000;
    while (!(await fullyTraced(pid))) {
      if (child.exitCode !== null) throw new Error(`strace exited ${child.exitCode}: ${stderr}`);
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`strace did not attach to every thread of ${pid} in 10 s: ${stderr}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    return new ExecTrace(child, out, exited);
  }

  async stop(): Promise<string[]> {
    this.child.kill('SIGINT');
    const code = await this.exited;
    assert.ok(code === 0 || code === null || code === 130, `strace exited ${code}`);
    const text = await readFile(this.out, 'utf8');
    return text.split('\n').filter((l) => /\bexecve(at)?\(/.test(l));
  }
}

/** The agent's node process: the one whose command line names its state dir. */
async function agentPid(stateDir: string): Promise<number> {
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    const argv = cmdline.split('\0');
    if (argv.some((a) => a.endsWith('/dist/bundle/tendril-agent.js')) && argv.includes(stateDir)) return Number(entry);
  }
  throw new Error(`no agent process with state dir ${stateDir}`);
}

describe('the agent runs no process on ADD, DEL and CHECK', () => {
  const pool = new NetnsPool('nx');
  let single: SingleNode | undefined;
  let dir = '';
  let control: ChildProcess | undefined;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tdl-noexec-'));
  });

  after(async () => {
    control?.kill('SIGKILL');
    await single?.cleanup();
    await pool.cleanup();
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  it('control: the tracing sees the execs of a Node process that spawns one', async () => {
    // A Node process that runs `true` when told to (SIGUSR2), as the agent would run `ip`.
    control = spawn(process.execPath, ['-e', "process.on('SIGUSR2', () => require('node:child_process').spawn('true')); setInterval(() => {}, 1000); console.log('ready')"], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve) => control!.stdout!.once('data', () => resolve()));
    const trace = await ExecTrace.attach(control.pid!, dir);
    control.kill('SIGUSR2');
    await new Promise((r) => setTimeout(r, 500));
    const execs = await trace.stop();
    assert.ok(execs.some((l) => l.includes('"true"') || l.includes('/true"')), `the control's exec was not traced: ${JSON.stringify(execs)}`);
  });

  it(`${PODS} ADDs, CHECKs and DELs run no process in the agent`, { timeout: 120_000 }, async () => {
    single = await startSingleNode(pool, { nodeName: 'tdl-noexec', args: ['--pod-cidr', '10.243.0.0/24'] });
    const { agent, runtime } = single;
    const list: NetworkConfigList = confListFromBytes(JSON.stringify({ cniVersion: '1.0.0', name: 'tdlnoexec', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
    const namespaces = await Promise.all(Array.from({ length: PODS }, (_, i) => pool.add(`p${i}`)));
    const rt = (i: number): RuntimeConf => ({ containerId: `tdl-noexec-${i}`, netns: namespaces[i]!.path, ifName: 'eth0', args: [] });

    const trace = await ExecTrace.attach(await agentPid(agent.stateDir), dir);
    let execs: string[];
    try {
      const results = (await Promise.all(namespaces.map((_, i) => runtime.addNetworkList(list, rt(i))))) as Result100[];
      assert.equal(results.length, PODS);
      for (const r of results) assert.match(r.ips?.[0]?.address ?? '', /^10\.243\.0\.\d+\/32$/);
      await Promise.all(namespaces.map((_, i) => runtime.checkNetworkList(list, rt(i))));
      await Promise.all(namespaces.map((_, i) => runtime.delNetworkList(list, rt(i))));
    } finally {
      execs = await trace.stop();
    }
    assert.deepEqual(execs, [], `the agent ran processes:\n${execs.join('\n')}`);
    // The burst did its work: pods came and went.
    const links = await pool.exec(single.node, ['ip', '-j', 'link', 'show']);
    assert.deepEqual(
      (JSON.parse(links.stdout) as Array<{ ifname: string }>).filter((l) => l.ifname.startsWith('lxc')),
      [],
    );
  });
});
