import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RESPONSE_MISMATCH } from '../../src/api/server/responseValidator.js';
import { VALIDATE_RESPONSES_ENV } from '../../src/api/types.js';
import { AgentClient } from '../../src/client/agentClient.js';
import { CniRuntime } from '../../src/libcni/index.js';
import type { NetnsPool } from './netns.js';
import { REFERENCE_PLUGIN_DIR } from './tendrilBin.js';
import { CNI_BIN } from '../../src/testing/cniBin.js';

export const AGENT_BIN = fileURLToPath(new URL('../../../bin/tendril-agent', import.meta.url));
export { CNI_BIN };

export interface AgentProcessOptions {
  /** The "node" network namespace the agent runs in. */
  nodeNetns: string;
  nodeName: string;
  args: string[];
  env?: Record<string, string>;
  /**
   * How the agent enters the node namespace: `nsenter --net` (default: the
   * node's mount namespace, the host's bpffs) or `ip netns exec`, which gives
   * it a mount namespace of its own with a fresh /sys (a private bpffs), or
   * `unshare --mount` then nsenter: a mount namespace of its own that still
   * has the node's /sys/fs/bpf, as a container with it bind-mounted.
   */
  launcher?: 'nsenter' | 'ip-netns-exec' | 'unshare-mount';
  /** How long `start` waits for the API (default 20 s); several eBPF agents loading at once on a busy machine take longer. */
  startTimeoutMs?: number;
  /** The agent's own default map sizes instead of the smaller test ones: a test whose traffic fills tables (default false). */
  defaultMapSizes?: boolean;
}

/** Enough for a test's traffic; one that runs thousands of connections a second for long asks for the defaults. */
const TEST_MAP_SIZES = {
  '--bpf-ct-tcp-max': 16384,
  '--bpf-ct-any-max': 8192,
  '--bpf-nat-max': 16384,
  '--bpf-lb-service-max': 2048,
  '--bpf-lb-backend-max': 2048,
  '--bpf-lb-revnat-max': 2048,
  '--bpf-lb-affinity-max': 2048,
  '--bpf-lb-member-max': 2048,
  '--bpf-lb-maglev-max': 256,
  '--bpf-lxc-max': 1024,
} as const;

/**
 * A tendril-agent running as a real process inside a node namespace, with its
 * own state dir and socket. `stop` sends SIGTERM, `kill` SIGKILL; `cleanup`
 * always kills and removes the state dir. It checks every response it sends
 * against api/openapi.yaml (TENDRIL_VALIDATE_RESPONSES=1): a response the
 * document does not describe becomes a 500 naming the mismatch, so every test
 * through it tests the contract too.
 */
export class AgentProcess {
  readonly stateDir: string;
  readonly socket: string;
  readonly client: AgentClient;
  private child: ChildProcess | undefined;
  private logs = '';
  private exited: Promise<number | null> = Promise.resolve(null);

  private constructor(
    readonly opts: AgentProcessOptions,
    stateDir: string,
  ) {
    this.stateDir = stateDir;
    // An agent started with --socket serves there (the agent's default is in its state dir).
    const i = opts.args.indexOf('--socket');
    this.socket = i >= 0 && opts.args[i + 1] !== undefined ? opts.args[i + 1]! : join(stateDir, 'tendril.sock');
    this.client = new AgentClient({ socketPath: this.socket, timeoutMs: 30_000 });
  }

  static async create(opts: AgentProcessOptions): Promise<AgentProcess> {
    const dir = await mkdtemp(join(tmpdir(), 'tdl-agent-'));
    return new AgentProcess(opts, dir);
  }

  /**
   * The agent's own bpffs root (unless its args name one): agents of
   * different tests must never share pinned maps. Kept across restarts of
   * this agent (they reuse the pins), removed at cleanup.
   */
  private readonly bpffsRoot = `/sys/fs/bpf/tdl-agent-${randomBytes(4).toString('hex')}`;

  /**
   * Map sizes for agents under test, unless the test gives its own: the
   * defaults (half a million conntrack and SNAT entries, 64 Ki of each
   * service table) are preallocated by the kernel at every agent's first
   * start, about 2 s of CPU each, which a test's handful of flows never uses.
   * The demo and the README's steps run the agent as a user does, with the
   * defaults.
   */
  private mapSizeArgs(): string[] {
    if (this.opts.defaultMapSizes === true || this.opts.args.includes('--config')) return [];
    const out: string[] = [];
    for (const [flag, value] of Object.entries(TEST_MAP_SIZES)) {
      if (!this.opts.args.some((a) => a === flag || a.startsWith(`${flag}=`))) out.push(flag, String(value));
    }
    return out;
  }

  private bpffsArgs(): string[] {
    return this.opts.args.some((a) => a === '--bpffs-root' || a.startsWith('--bpffs-root=')) ? [] : ['--bpffs-root', this.bpffsRoot];
  }

  /**
   * Starts the agent and waits until its API answers with status ok (or, with
   * `degraded`, with any status: a test that expects the agent to report
   * itself degraded).
   */
  async start(extraEnv: Record<string, string> = {}, opts: { degraded?: boolean } = {}): Promise<void> {
    const nsenter = ['nsenter', `--net=/var/run/netns/${this.opts.nodeNetns}`, '--'];
    const enter =
      this.opts.launcher === 'ip-netns-exec' ? ['ip', 'netns', 'exec', this.opts.nodeNetns] : this.opts.launcher === 'unshare-mount' ? ['unshare', '--mount', '--propagation', 'slave', '--', ...nsenter] : nsenter;
    const argv = [...enter, AGENT_BIN, '--state-dir', this.stateDir, '--lib-dir', join(this.stateDir, 'lib'), '--node-name', this.opts.nodeName, ...this.bpffsArgs(), ...this.mapSizeArgs(), ...this.opts.args];
    const env = { ...process.env, [VALIDATE_RESPONSES_ENV]: '1', ...this.opts.env, ...extraEnv };
    const child = spawn(argv[0]!, argv.slice(1), { env, stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    child.stdout!.on('data', (c: Buffer) => (this.logs += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (this.logs += c.toString()));
    this.exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
    const startTimeoutMs = this.opts.startTimeoutMs ?? 45_000;
    const deadline = Date.now() + startTimeoutMs;
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`agent exited during start-up:\n${this.logs}`);
      try {
        const h = await this.client.health();
        if (h.status === 'ok' || opts.degraded === true) return;
      } catch {
        // Not listening yet.
      }
      if (Date.now() > deadline) throw new Error(`agent did not become ready in ${startTimeoutMs / 1000} s:\n${this.logs}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Clean shutdown: pods keep their network. An agent that does not stop in 15 s is killed and the test fails. */
  async stop(): Promise<void> {
    if (!this.child || this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGTERM');
    await this.waitExit(15_000).catch(async (err: Error) => {
      await this.kill();
      throw err;
    });
  }

  async kill(): Promise<void> {
    if (!this.child || this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGKILL');
    await this.exited;
  }

  /** Resolves when the process exits by itself (e.g. a fault point); rejects after `timeoutMs`. */
  async waitExit(timeoutMs = 20_000): Promise<number | null> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`agent did not exit within ${timeoutMs} ms:\n${this.logs.slice(-2000)}`)), timeoutMs);
    });
    try {
      return await Promise.race([this.exited, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  get output(): string {
    return this.logs;
  }

  /** The agent's process id (nsenter execs the agent in its place), while it runs. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** The agent's log lines about responses it found not to match api/openapi.yaml (each was answered as a 500). */
  get contractViolations(): string[] {
    return this.logs.split('\n').filter((l) => l.includes(RESPONSE_MISMATCH));
  }

  /**
   * Kills the agent and removes its state. Mismatches the agent found are
   * repeated on stderr: a test that expected some failure may have taken the
   * 500 for it. (Throwing here would skip the caller's namespace cleanup.)
   */
  async cleanup(): Promise<void> {
    await this.kill();
    await rm(this.stateDir, { recursive: true, force: true });
    // Pins only (a pinned link's device went with the test's namespaces); nothing else lives there.
    await rm(this.bpffsRoot, { recursive: true, force: true });
    const violations = this.contractViolations;
    if (violations.length > 0) process.stderr.write(`tendril-agent ${this.opts.nodeName}: ${violations.length} responses did not match api/openapi.yaml:\n${violations.join('\n')}\n`);
  }
}

/**
 * A CNI_PATH dir holding tendril-cni, plus the reference plugins' dir. The
 * plugin is a copy, as a runtime's plugin dir holds it (/opt/cni/bin): the
 * relay must run from anywhere, with nothing of the repository beside it.
 */
export async function tendrilPluginDir(): Promise<{ dir: string; cleanup(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'tdl-cnibin-'));
  await copyFile(CNI_BIN, join(dir, 'tendril-cni'));
  await chmod(join(dir, 'tendril-cni'), 0o755);
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

/** One node: an agent in its own namespace and a libcni runtime that reaches it through tendril-cni. */
export interface SingleNode {
  node: string;
  agent: AgentProcess;
  runtime: CniRuntime;
  /** Stops the agent and removes its state, the plugin dir and the runtime's cache. */
  cleanup(): Promise<void>;
}

export async function startSingleNode(pool: NetnsPool, opts: { nodeName: string; args: string[] }): Promise<SingleNode> {
  const node = (await pool.add('node')).name;
  const cleanups: Array<() => Promise<void>> = [];
  const cleanup = async () => {
    for (const c of cleanups.reverse()) await c();
  };
  try {
    const agent = await AgentProcess.create({ nodeNetns: node, nodeName: opts.nodeName, args: opts.args });
    cleanups.push(() => agent.cleanup());
    const bin = await tendrilPluginDir();
    cleanups.push(bin.cleanup);
    const cache = await mkdtemp(join(tmpdir(), 'tdl-cache-'));
    cleanups.push(() => rm(cache, { recursive: true, force: true }));
    const runtime = new CniRuntime({ pluginDirs: [bin.dir, REFERENCE_PLUGIN_DIR], cacheDir: cache });
    await agent.start();
    return { node, agent, runtime, cleanup };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/** Whether one ICMP echo from a namespace reaches an address. */
export async function ping(pool: NetnsPool, fromNs: string, ip: string): Promise<boolean> {
  return (await pool.exec(fromNs, ['ping', '-c', '1', '-W', '2', ip])).code === 0;
}

/** Host-side pod interfaces (lxc…) in a node namespace. */
export async function podHostLinks(pool: NetnsPool, node: string): Promise<string[]> {
  const r = await pool.exec(node, ['ip', '-j', 'link', 'show']);
  return (JSON.parse(r.stdout) as Array<{ ifname: string }>).map((l) => l.ifname).filter((n) => n.startsWith('lxc'));
}

/** Addresses the agent has allocated to pods (the router's left out), as owner=ip. */
export async function podAllocations(agent: AgentProcess): Promise<string[]> {
  const l = await agent.client.listIpam();
  return l.allocations.filter((a) => !a.owner.startsWith('tendril:router')).map((a) => `${a.owner}=${a.ip}`);
}
