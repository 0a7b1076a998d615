import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run, type RunResult } from '../run.js';
import { buildBusyboxRootfs } from './busybox.js';

export interface ContainerdOptions {
  /** The network namespace the daemon and every ctr run in. */
  nodeNetns: string;
  /** Shown to `ctr run --cni` as /etc/cni/net.d (it reads the first file there). */
  cniConfDir: string;
  /** Shown to `ctr run --cni` as /usr/lib/cni (Debian's ctr searches /opt/cni/bin:/usr/lib/cni). */
  cniBinDir: string;
}

const NAMESPACE = 'tdl';

/** A `ctr run` left in the foreground: ADD before the task starts, DEL after it exits. */
export interface ForegroundRun {
  name: string;
  child: ChildProcess;
  /** Resolves when ctr exits (after its DEL), with everything it printed. */
  done: Promise<RunResult>;
}

/**
 * A private containerd 1.6 (CRI disabled; root, state, sockets and opt dir in
 * a temp dir) in its own mount namespace, which every `ctr` joins. In that
 * namespace only: a tmpfs on /run (shim sockets, FIFOs, runc state), and the
 * test's dirs bind-mounted on /etc/cni/net.d and /usr/lib/cni, because
 * `ctr run --cni` has no flag for either. The host's files are never touched.
 */
export class Containerd {
  private daemon: ChildProcess | undefined;
  private daemonLog = '';
  private readonly runs: ForegroundRun[] = [];
  readonly socket: string;

  private constructor(
    readonly opts: ContainerdOptions,
    readonly root: string,
  ) {
    this.socket = join(root, 'containerd.sock');
  }

  static async create(opts: ContainerdOptions): Promise<Containerd> {
    const root = await mkdtemp(join(tmpdir(), 'tdl-containerd-'));
    for (const d of ['root', 'state', 'opt', 'rootfs']) await mkdir(join(root, d));
    return new Containerd(opts, root);
  }

  /** Fails loudly when containerd is not installed (make apt-deps installs it). */
  static async requireInstalled(): Promise<void> {
    for (const bin of ['containerd', 'ctr', 'containerd-shim-runc-v2']) {
      const r = await run(['sh', '-c', `command -v ${bin}`]);
      if (r.code !== 0) throw new Error(`${bin} is not installed (make apt-deps installs containerd)`);
    }
  }

  async start(): Promise<void> {
    const config = join(this.root, 'config.toml');
    const q = (s: string) => JSON.stringify(s);
    await writeFile(
      config,
      [
        'version = 2',
        `root = ${q(join(this.root, 'root'))}`,
        `state = ${q(join(this.root, 'state'))}`,
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]',
        '[grpc]',
        `  address = ${q(this.socket)}`,
        '[ttrpc]',
        `  address = ${q(`${this.socket}.ttrpc`)}`,
        '[debug]',
        '  address = ""',
        '[plugins."io.containerd.internal.v1.opt"]',
        `  path = ${q(join(this.root, 'opt'))}`,
        '',
      ].join('\n'),
    );
    for (const p of [this.opts.cniConfDir, this.opts.cniBinDir]) if (!existsSync(p)) throw new Error(`${p} missing`);
    if (!existsSync('/etc/cni/net.d') || !existsSync('/usr/lib/cni')) throw new Error('/etc/cni/net.d and /usr/lib/cni must exist as mount points (containernetworking-plugins and podman create them)');
    const script = [
      'set -e',
      'mount -t tmpfs tdlrun /run',
      `mount --bind ${shq(this.opts.cniConfDir)} /etc/cni/net.d`,
      `mount --bind ${shq(this.opts.cniBinDir)} /usr/lib/cni`,
      `exec containerd --config ${shq(config)}`,
    ].join('\n');
    // nsenter and unshare (without --fork) exec, and so does sh: the child is containerd itself.
    const child = spawn('nsenter', [`--net=/var/run/netns/${this.opts.nodeNetns}`, '--', 'unshare', '--mount', '--propagation', 'private', '--', 'sh', '-c', script], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.daemon = child;
    child.stdout!.on('data', (c: Buffer) => (this.daemonLog += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (this.daemonLog += c.toString()));
    const deadline = Date.now() + 20_000;
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`containerd exited during start-up:\n${this.daemonLog.slice(-3000)}`);
      if ((await this.ctr(['version'])).code === 0) return;
      if (Date.now() > deadline) throw new Error(`containerd did not answer in 20 s:\n${this.daemonLog.slice(-3000)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  private ctrArgv(args: readonly string[]): string[] {
    return ['nsenter', `--mount=/proc/${this.daemon!.pid}/ns/mnt`, `--net=/var/run/netns/${this.opts.nodeNetns}`, '--', 'ctr', '-a', this.socket, '-n', NAMESPACE, ...args];
  }

  /** Runs `ctr <args>` in the daemon's mount namespace and the node's network namespace. */
  ctr(args: readonly string[], timeoutMs = 30_000): Promise<RunResult> {
    return run(this.ctrArgv(args), { timeoutMs });
  }

  /** The container ID ctr hands to CNI: `<namespace>-<id>`. */
  static cniContainerId(name: string): string {
    return `${NAMESPACE}-${name}`;
  }

  /**
   * `ctr run --rm --cni --rootfs <busybox> <name> <command>` in the foreground:
   * resolves once started; `done` resolves when the task has exited and ctr
   * has run DEL and removed the container.
   */
  async runForeground(name: string, command: readonly string[]): Promise<ForegroundRun> {
    const rootfs = join(this.root, 'rootfs', name);
    await buildBusyboxRootfs(rootfs);
    const argv = this.ctrArgv(['run', '--rm', '--cni', '--env', 'PATH=/bin', '--rootfs', rootfs, name, ...command]);
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    const done = new Promise<RunResult>((resolve) => child.on('close', (code, signal) => resolve({ code: code ?? (signal ? 128 : 1), stdout, stderr })));
    const r: ForegroundRun = { name, child, done };
    this.runs.push(r);
    return r;
  }

  /** Kills every task, waits for the foreground ctr processes (their DELs), stops the daemon, removes the dir. */
  async cleanup(): Promise<string[]> {
    const problems: string[] = [];
    if (this.daemon && this.daemon.exitCode === null && this.daemon.signalCode === null) {
      for (const r of this.runs) {
        if (r.child.exitCode !== null || r.child.signalCode !== null) continue;
        await this.ctr(['task', 'kill', '-s', 'SIGKILL', r.name]);
        const exited = await Promise.race([r.done.then(() => true), new Promise<boolean>((res) => setTimeout(() => res(false), 15_000))]);
        if (!exited) {
          problems.push(`ctr run ${r.name} did not exit after its task was killed`);
          r.child.kill('SIGKILL');
        }
      }
      const left = await this.ctr(['containers', 'list', '-q']);
      for (const id of left.stdout.split('\n').filter(Boolean)) {
        await this.ctr(['task', 'delete', '-f', id]);
        await this.ctr(['containers', 'delete', id]);
        problems.push(`container ${id} was left behind`);
      }
      const exited = new Promise((res) => this.daemon!.on('exit', res));
      this.daemon.kill('SIGTERM');
      await Promise.race([exited, new Promise((res) => setTimeout(res, 10_000))]);
      if (this.daemon.exitCode === null && this.daemon.signalCode === null) this.daemon.kill('SIGKILL');
    }
    await rm(this.root, { recursive: true, force: true });
    return problems;
  }

  get log(): string {
    return this.daemonLog;
  }
}

function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
