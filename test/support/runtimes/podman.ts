import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run, type RunResult } from '../run.js';
import { buildBusyboxRootfs } from './busybox.js';

export interface PodmanOptions {
  /** The network namespace podman (and so conmon, cleanup and the plugins' host side) runs in. */
  nodeNetns: string;
  /** CNI_PATH for podman's CNI backend, searched in order. */
  pluginDirs: string[];
}

function tomlString(s: string): string {
  return JSON.stringify(s);
}

/**
 * Podman 4 with its CNI backend, confined to a private temp dir: containers.conf
 * and storage.conf come from CONTAINERS_CONF / CONTAINERS_STORAGE_CONF, graph
 * root, run root, tmp dir and the CNI config dir are all inside `root`. The
 * host's /etc/containers and /etc/cni/net.d are never read for networks nor
 * written. Every podman command runs with `nsenter --net` in the node
 * namespace (not `ip netns exec`, which remounts /sys and breaks runc).
 * `cleanup` removes every container this instance made and the whole dir.
 */
export class Podman {
  readonly containers: string[] = [];

  private constructor(
    readonly opts: PodmanOptions,
    readonly root: string,
    readonly networkConfigDir: string,
    readonly env: NodeJS.ProcessEnv,
  ) {}

  static async create(opts: PodmanOptions): Promise<Podman> {
    const root = await mkdtemp(join(tmpdir(), 'tdl-podman-'));
    const dirs = { net: join(root, 'cni-net.d'), graph: join(root, 'storage'), run: join(root, 'runroot'), tmp: join(root, 'tmp') };
    for (const d of Object.values(dirs)) await mkdir(d, { recursive: true });
    const containersConf = join(root, 'containers.conf');
    const storageConf = join(root, 'storage.conf');
    await writeFile(
      containersConf,
      [
        '[containers]',
        // No CAP_SYS_RESOURCE on these VMs: podman's default ulimits would fail.
        'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]',
        '',
        '[network]',
        'network_backend = "cni"',
        `cni_plugin_dirs = [${opts.pluginDirs.map(tomlString).join(', ')}]`,
        `network_config_dir = ${tomlString(dirs.net)}`,
        '',
        '[engine]',
        // crun refuses hybrid cgroups here; runc works.
        'runtime = "runc"',
        'cgroup_manager = "cgroupfs"',
        'events_logger = "none"',
        `tmp_dir = ${tomlString(dirs.tmp)}`,
        '',
      ].join('\n'),
    );
    await writeFile(storageConf, ['[storage]', 'driver = "vfs"', `graphroot = ${tomlString(dirs.graph)}`, `runroot = ${tomlString(dirs.run)}`, ''].join('\n'));
    const env: NodeJS.ProcessEnv = { ...process.env, CONTAINERS_CONF: containersConf, CONTAINERS_STORAGE_CONF: storageConf };
    // The plugin must find the agent through the netconf alone.
    delete env.TENDRIL_SOCK;
    return new Podman(opts, root, dirs.net, env);
  }

  /** Fails loudly with a pointer to the Makefile when podman is not installed. */
  static async requireInstalled(): Promise<string> {
    let r: RunResult;
    try {
      r = await run(['podman', '--version']);
    } catch (e) {
      throw new Error(`podman is not installed (make apt-deps installs podman, runc and busybox-static): ${(e as Error).message}`);
    }
    if (r.code !== 0) throw new Error(`podman --version failed: ${r.stderr.trim()}`);
    return r.stdout.trim();
  }

  async writeConflist(name: string, conflist: unknown): Promise<void> {
    await writeFile(join(this.networkConfigDir, `${name}.conflist`), JSON.stringify(conflist, null, 2));
  }

  /** Runs `podman <args>` in the node namespace. */
  podman(args: readonly string[], timeoutMs = 60_000, extraEnv: NodeJS.ProcessEnv = {}): Promise<RunResult> {
    return run(['nsenter', `--net=/var/run/netns/${this.opts.nodeNetns}`, '--', 'podman', ...args], { env: { ...this.env, ...extraEnv }, timeoutMs });
  }

  async podmanOk(args: readonly string[], timeoutMs = 60_000, extraEnv: NodeJS.ProcessEnv = {}): Promise<string> {
    const r = await this.podman(args, timeoutMs, extraEnv);
    if (r.code !== 0) throw new Error(`podman ${args.join(' ')} exited ${r.code}: ${r.stderr.trim() || r.stdout.trim()}`);
    return r.stdout;
  }

  /**
   * `podman run -d --name <name> <runArgs> --rootfs <busybox rootfs> <command>`:
   * each container gets its own busybox rootfs built offline (no registry, no
   * image store, nothing in the host's /var/lib/containers). The container is
   * removed by cleanup. Returns its full ID.
   */
  async runBusybox(name: string, runArgs: readonly string[], command: readonly string[], extraEnv: NodeJS.ProcessEnv = {}): Promise<string> {
    const rootfs = join(this.root, 'rootfs', name);
    await buildBusyboxRootfs(rootfs);
    this.containers.push(name);
    return (await this.podmanOk(['run', '-d', '--name', name, ...runArgs, '--rootfs', rootfs, ...command], 60_000, extraEnv)).trim();
  }

  async inspect<T = Record<string, unknown>>(name: string): Promise<T> {
    const out = JSON.parse(await this.podmanOk(['inspect', '--type', 'container', name])) as T[];
    return out[0]!;
  }

  /** Removes every container this instance made, then the private root (after unmounting anything left under it). */
  async cleanup(): Promise<string[]> {
    const problems: string[] = [];
    if (this.containers.length > 0) {
      const r = await this.podman(['rm', '-f', '-t', '0', '--ignore', ...this.containers]);
      if (r.code !== 0) problems.push(`podman rm: ${r.stderr.trim()}`);
    }
    const mounts = (await readFile('/proc/self/mounts', 'utf8').catch(() => ''))
      .split('\n')
      .map((l) => l.split(' ')[1] ?? '')
      .filter((m) => m.startsWith(`${this.root}/`))
      .sort()
      .reverse();
    for (const m of mounts) await run(['umount', '-l', m]);
    // `podman rm` returns before conmon's exit command (`podman container
    // cleanup`, started with this root's paths on its command line) has
    // finished writing libpod's state: removing the dir under it fails with
    // ENOTEMPTY. Wait for those processes first.
    const left = await this.#waitForOwnProcesses(15_000);
    if (left.length > 0) problems.push(`processes still using ${this.root} after 15 s: ${left.join(', ')}`);
    await rm(this.root, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
    return problems;
  }

  /** Waits until no process has this instance's root on its command line; returns the pids still left. */
  async #waitForOwnProcesses(timeoutMs: number): Promise<string[]> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const pids: string[] = [];
      for (const pid of await readdir('/proc')) {
        if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
        const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
        if (cmdline.includes(this.root)) pids.push(pid);
      }
      if (pids.length === 0 || Date.now() > deadline) return pids;
      await sleep(100);
    }
  }
}
