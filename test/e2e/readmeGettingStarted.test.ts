// The README's getting-started path, followed command by command: its ```sh
// blocks are read from README.md (test/support/readmeBlocks.ts) and run as
// written, each README "host" being a fresh network namespace with an
// underlay, its own hostname, dirs and netns names (the substitutions are
// all in `isolate`). One host: the agent, two pods through the real plugin,
// ping and TCP, a policy that lets TCP 8080 in and drops the ping, the drop
// in `tendril monitor`, status, then "Removing tendril" after Ctrl-C (nothing
// of tendril left on the host). A second node: etcd and two agents over VXLAN,
// a pod on each reaching the other. The Kubernetes path cannot run here (no
// API server): test/docs/readmeBlocks.test.ts checks its commands' syntax.
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AgentClient } from '../../src/client/agentClient.js';
import { type HostIsolation, expectFailures, isolate, pathSteps, readmeBlocks, type ReadmeBlock } from '../support/readmeBlocks.js';
import { requireRoot } from '../support/root.js';
import { run, runOk, toolEnv } from '../support/run.js';

requireRoot("the README's getting-started test");

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const BLOCKS = readmeBlocks();

/** The README's hosts' addresses on their network (its "Add a second node" names them). */
const HOST_IP: Record<string, string> = { host1: '192.168.56.10', host2: '192.168.56.11' };
const GATEWAY_IP = '192.168.56.1';

interface Host {
  name: string;
  netns: string;
  iso: HostIsolation;
  env: NodeJS.ProcessEnv;
  vars: string;
}

/**
 * One path of the README on fresh hosts: a namespace per host, joined by a
 * bridge in a "network" namespace, and everything the blocks start in process
 * groups of their own, all killed at the end.
 */
class ReadmeRun {
  readonly prefix = `tdlgs${randomBytes(2).toString('hex')}`;
  readonly dir = mkdtempSync(join(tmpdir(), 'tdl-readme-'));
  private readonly namespaces: string[] = [];
  private readonly groups: Array<{ child: ChildProcess; what: string }> = [];
  /** Each host's agent, started by a background block. */
  private readonly agents = new Map<string, ChildProcess>();
  private readonly hosts = new Map<string, Host>();
  readonly outputs: Array<{ host: string; line: number; out: string }> = [];
  private bridgeNs = '';

  private async addNetns(name: string): Promise<void> {
    await runOk(['ip', 'netns', 'add', name]);
    this.namespaces.push(name);
    await runOk(['ip', '-n', name, 'link', 'set', 'lo', 'up']);
  }

  async host(name: string): Promise<Host> {
    const known = this.hosts.get(name);
    if (known) return known;
    if (this.bridgeNs === '') {
      this.bridgeNs = `${this.prefix}net`;
      await this.addNetns(this.bridgeNs);
      await runOk(['ip', '-n', this.bridgeNs, 'link', 'add', 'br0', 'type', 'bridge']);
      await runOk(['ip', '-n', this.bridgeNs, 'addr', 'add', `${GATEWAY_IP}/24`, 'dev', 'br0']);
      await runOk(['ip', '-n', this.bridgeNs, 'link', 'set', 'br0', 'up']);
    }
    const netns = `${this.prefix}${name}`;
    await this.addNetns(netns);
    const port = `p${name}`;
    await runOk(['ip', '-n', this.bridgeNs, 'link', 'add', port, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', `/var/run/netns/${netns}`]);
    await runOk(['ip', '-n', this.bridgeNs, 'link', 'set', port, 'master', 'br0', 'up']);
    await runOk(['ip', '-n', netns, 'addr', 'add', `${HOST_IP[name]}/24`, 'dev', 'eth0']);
    await runOk(['ip', '-n', netns, 'link', 'set', 'eth0', 'up']);
    await runOk(['ip', '-n', netns, 'route', 'add', 'default', 'via', GATEWAY_IP]);
    const d = join(this.dir, name);
    const iso: HostIsolation = {
      stateDir: join(d, 'run'),
      libDir: join(d, 'lib'),
      bpffsRoot: `/sys/fs/bpf/${netns}`,
      netconfDir: join(d, 'net.d'),
      pluginDir: join(d, 'cni-bin'),
      cacheDir: join(d, 'cni-cache'),
      etcdDir: join(d, 'etcd'),
      netns: { 'web-pod': `${this.prefix}w${name.slice(-1)}`, 'client-pod': `${this.prefix}c${name.slice(-1)}` },
    };
    for (const pod of Object.values(iso.netns)) this.namespaces.push(pod);
    mkdirSync(d, { recursive: true });
    const env: NodeJS.ProcessEnv = {
      ...toolEnv(),
      TENDRIL_SOCK: join(iso.stateDir, 'tendril.sock'),
      NETCONFPATH: iso.netconfDir,
      CNI_PATH: iso.pluginDir,
    };
    const host: Host = { name, netns, iso, env, vars: join(d, 'vars.sh') };
    writeFileSync(host.vars, '');
    this.hosts.set(name, host);
    return host;
  }

  /** The argv that runs a script on a host: its network namespace, a UTS namespace with its own hostname (the agent's node name). */
  private argv(host: Host, script: string): string[] {
    return ['nsenter', `--net=/var/run/netns/${host.netns}`, '--', 'unshare', '--uts', '--', 'bash', '-c', `hostname ${host.netns} && exec bash ${script}`];
  }

  private spawnLogged(host: Host, script: string, log: string): ChildProcess {
    const fd = openSync(log, 'w');
    try {
      const child = spawn(this.argv(host, script)[0]!, this.argv(host, script).slice(1), { cwd: ROOT, env: host.env, detached: true, stdio: ['ignore', fd, fd] });
      this.groups.push({ child, what: `${host.name} ${script}` });
      return child;
    } finally {
      closeSync(fd);
    }
  }

  /** Runs a foreground block; variables it sets carry over to the host's next block (as in one terminal). */
  async step(hostName: string, block: ReadmeBlock): Promise<string> {
    const host = await this.host(hostName);
    const n = this.outputs.length;
    const script = join(this.dir, `${hostName}-${n}.sh`);
    const code = expectFailures(isolate(block.code, host.iso), block.line);
    writeFileSync(script, `set -euo pipefail\nset -a\nsource ${host.vars}\n${code}\nexport -p > ${host.vars}\n`);
    const log = join(this.dir, `${hostName}-${n}.log`);
    const child = this.spawnLogged(host, script, log);
    const status = await new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
      child.on('exit', (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    const out = readFileSync(log, 'utf8');
    this.outputs.push({ host: hostName, line: block.line, out });
    assert.equal(status, 0, `README.md line ${block.line} on ${hostName} exited ${status}:\n${out}`);
    return out;
  }

  /** Starts a background block and waits until what it starts answers. */
  async background(hostName: string, block: ReadmeBlock): Promise<void> {
    const host = await this.host(hostName);
    const code = isolate(block.code, host.iso);
    const n = this.groups.length;
    const script = join(this.dir, `${hostName}-bg${n}.sh`);
    writeFileSync(script, `set -euo pipefail\nexec ${code.trim()}\n`);
    const log = join(this.dir, `${hostName}-bg${n}.log`);
    const child = this.spawnLogged(host, script, log);
    if (/^bin\/tendril-agent /.test(code)) this.agents.set(hostName, child);
    const deadline = Date.now() + 60_000;
    const etcdUrl = /--advertise-client-urls (\S+)/.exec(code)?.[1];
    const client = new AgentClient({ socketPath: join(host.iso.stateDir, 'tendril.sock'), timeoutMs: 5000 });
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) assert.fail(`README.md line ${block.line} on ${hostName} exited:\n${readFileSync(log, 'utf8')}`);
      if (etcdUrl !== undefined) {
        const r = await run(['nsenter', `--net=/var/run/netns/${host.netns}`, '--', 'curl', '-s', '-m', '1', `${etcdUrl}/health`]);
        if (r.stdout.includes('"health":"true"')) return;
      } else {
        const h = await client.health().catch(() => undefined);
        if (h?.status === 'ok') return;
      }
      if (Date.now() > deadline) assert.fail(`README.md line ${block.line} on ${hostName} not ready in 60 s:\n${readFileSync(log, 'utf8')}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  async runPath(path: string): Promise<void> {
    const steps = pathSteps(BLOCKS, path);
    assert.ok(steps.length > 0, `README.md has blocks for ${path}`);
    for (const { host, block } of steps) {
      if (block.agentStopped) await this.stopAgent(host);
      if (block.background) await this.background(host, block);
      else await this.step(host, block);
    }
  }

  /** Ctrl-C in the agent's terminal: SIGINT, and it must be gone within 15 s. */
  async stopAgent(hostName: string): Promise<void> {
    const agent = this.agents.get(hostName);
    assert.ok(agent?.pid !== undefined, `${hostName} has an agent to stop`);
    if (agent.exitCode !== null || agent.signalCode !== null) return;
    const exited = new Promise((r) => agent.once('exit', r));
    process.kill(-agent.pid, 'SIGINT');
    const timer = new Promise((_, reject) => setTimeout(() => reject(new Error(`${hostName}'s agent did not stop on SIGINT in 15 s`)), 15_000));
    await Promise.race([exited, timer]);
  }

  /** What the README's commands left on a host: tendril's devices, pods' host interfaces, its dirs and pins, the CNI files. */
  async leftOn(hostName: string): Promise<string[]> {
    const host = await this.host(hostName);
    const links = JSON.parse((await runOk(['ip', '-n', host.netns, '-j', 'link', 'show'])) || '[]') as Array<{ ifname: string }>;
    const out = links.map((l) => l.ifname).filter((n) => n.startsWith('tendril_') || n.startsWith('lxc'));
    for (const p of [host.iso.stateDir, host.iso.libDir, join(host.iso.bpffsRoot, 'tendril'), join(host.iso.netconfDir, '10-tendril.conflist'), join(host.iso.pluginDir, 'tendril-cni')]) {
      if (existsSync(p)) out.push(p);
    }
    const netns = (await runOk(['ip', 'netns', 'list'])).split('\n').map((l) => l.split(' ')[0]);
    for (const pod of Object.values(host.iso.netns)) if (netns.includes(pod)) out.push(`netns ${pod}`);
    const nft = await runOk(['nsenter', `--net=/var/run/netns/${host.netns}`, '--', 'nft', 'list', 'tables']).catch(() => '');
    if (nft.includes('tendril')) out.push(nft.trim());
    return out;
  }

  /** Everything started (agents, etcd, servers), then namespaces, dirs and pins. */
  async cleanup(): Promise<void> {
    // Agents and etcd first, politely: an agent stopped by SIGTERM leaves nothing half-written.
    for (const g of this.groups.reverse()) {
      if (g.child.pid === undefined) continue;
      try {
        process.kill(-g.child.pid, 'SIGTERM');
      } catch {
        // The group is gone already.
      }
    }
    await new Promise((r) => setTimeout(r, 1000));
    for (const g of this.groups) {
      if (g.child.pid === undefined) continue;
      try {
        process.kill(-g.child.pid, 'SIGKILL');
      } catch {
        // Gone.
      }
    }
    for (const ns of this.namespaces.reverse()) await run(['ip', 'netns', 'del', ns]);
    for (const h of this.hosts.values()) rmSync(h.iso.bpffsRoot, { recursive: true, force: true });
    rmSync(this.dir, { recursive: true, force: true });
  }

  /** Processes of this run still alive (must be none after cleanup): in its process groups (the busybox server is one), or naming its namespaces. */
  async leftovers(): Promise<string[]> {
    const groups = this.groups.flatMap((g) => (g.child.pid === undefined ? [] : [String(g.child.pid)]));
    const byGroup = groups.length === 0 ? '' : (await run(['pgrep', '-a', '-g', groups.join(',')])).stdout;
    const byName = (await run(['pgrep', '-a', '-f', this.prefix])).stdout;
    // A killed process waits as a zombie until init reaps it: dead, not left running.
    return `${byGroup}\n${byName}`.split('\n').filter((l) => l.trim() !== '' && !l.endsWith('<defunct>'));
  }
}

describe("README getting started, run as written", () => {
  const runs: ReadmeRun[] = [];
  after(async () => {
    for (const r of runs) await r.cleanup();
  });

  test('one host: agent, two pods through tendril-cni, ping and TCP, a policy that denies and allows, monitor and status, removal', async () => {
    const r = new ReadmeRun();
    runs.push(r);
    try {
      await r.runPath('one-host');
      const all = r.outputs.map((o) => o.out).join('\n');
      assert.match(all, /1 received/, 'the first ping answered');
      assert.equal(all.match(/^hello from web$/gm)?.length, 2, 'TCP 8080 answered before and after the policy');
      assert.match(all, /Imported: TendrilClusterwideNetworkPolicy\/web/);
      assert.match(all, /container:app=web/, 'endpoint list shows the labels');
      assert.match(all, /DROP \(POLICY[^\n]*container:app=client[^\n]*container:app=web[^\n]*TendrilClusterwideNetworkPolicy\/web/, 'tendril monitor shows the drop and the policy');
      assert.match(all, /^Endpoints\s+2\b/m, 'tendril status counts the two pods');
      assert.deepEqual(await r.leftOn('host1'), [], '"Removing tendril" left nothing of tendril on the host');
    } finally {
      await r.cleanup();
    }
    assert.deepEqual(await r.leftovers(), [], 'nothing of the run is left running');
  });

  test('a second node: etcd, two agents over VXLAN, a pod on each reaching the other', async () => {
    const r = new ReadmeRun();
    runs.push(r);
    try {
      await r.runPath('second-node');
      const host2 = r.outputs.filter((o) => o.host === 'host2').map((o) => o.out).join('\n');
      assert.match(host2, /^\S+host1\s+192\.168\.56\.10.*tunnel \(vxlan:8472\)\s+ok/m, 'node list on the second node shows the first, over VXLAN');
      assert.match(host2, /2 packets transmitted, 2 received/, 'the second node\'s pod reaches the first\'s');
    } finally {
      await r.cleanup();
    }
    assert.deepEqual(await r.leftovers(), [], 'nothing of the run is left running');
  });
});
