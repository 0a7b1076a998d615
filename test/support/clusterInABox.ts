import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ETCD_BIN } from './etcdHarness.js';
import { NetnsPool } from './netns.js';
import { runOk } from './run.js';

export interface ClusterNode {
  /** Network namespace the node's agent runs in. */
  netns: string;
  /** The node's address on the cluster network (of the underlay's family; IPv4 on a dual-stack one). */
  ip: string;
  /** Its IPv6 address on a dual-stack cluster network. */
  ip6?: string;
}

/** The cluster network's addresses per underlay family: the hub's (etcd's), node i's, the prefix length. */
const UNDERLAY = {
  4: { hub: '10.248.0.1', node: (i: number) => `10.248.0.${11 + i}`, length: 24 },
  6: { hub: 'fd00:248::1', node: (i: number) => `fd00:248::${11 + i}`, length: 64 },
} as const;

/**
 * The family of the cluster network: IPv4 (the default); dual-stack (IPv4
 * as ever, each node's eth0 with an IPv6 address too, UNDERLAY[6]'s); or
 * IPv6 only (no IPv4 address on any node's eth0, etcd on IPv6).
 */
export type UnderlayFamily = 4 | 6 | 'dual';
/**
 * The hub bridge's MAC, set at creation: a bridge without one takes the
 * lowest MAC among its ports, so a host added later could change it and
 * black-hole the nodes' traffic to etcd until their ARP entries age out
 * (long enough for node leases to expire).
 */
export const HUB_BRIDGE_MAC = '02:74:64:6c:00:01';

/**
 * Several "nodes" and an etcd on one machine: a hub namespace holds a bridge
 * and etcd; every node namespace is wired to the bridge by a veth pair. All
 * traffic stays inside namespaces the test made.
 */
export class ClusterInABox {
  readonly etcdEndpoint: string;
  readonly nodes: ClusterNode[] = [];
  /** The hub namespace: the bridge every node (and every extra host) hangs off, and etcd. */
  hub = '';
  private hostSeq = 0;
  private etcd: ChildProcess | undefined;
  private etcdDir = '';

  private constructor(
    readonly pool: NetnsPool,
    readonly underlay: UnderlayFamily,
  ) {
    const hub = UNDERLAY[underlay === 6 ? 6 : 4].hub;
    this.etcdEndpoint = `http://${underlay === 6 ? `[${hub}]` : hub}:2379`;
  }

  /** `underlay` 6: every address on the cluster network is IPv6 (nodad: usable at once), none IPv4. */
  static async create(tag: string, nodeCount: number, underlay: UnderlayFamily = 4): Promise<ClusterInABox> {
    const c = new ClusterInABox(new NetnsPool(tag), underlay);
    try {
      await c.build(nodeCount);
    } catch (err) {
      await c.cleanup();
      throw err;
    }
    return c;
  }

  private async build(nodeCount: number): Promise<void> {
    const hub = (await this.pool.add('hub')).name;
    this.hub = hub;
    await runOk(['ip', '-n', hub, 'link', 'add', 'tdlhub0', 'address', HUB_BRIDGE_MAC, 'type', 'bridge']);
    const net = UNDERLAY[this.underlay === 6 ? 6 : 4];
    await this.#addAddress(hub, net.hub, 'tdlhub0');
    if (this.underlay === 'dual') await this.#addAddress(hub, UNDERLAY[6].hub, 'tdlhub0', 6);
    await runOk(['ip', '-n', hub, 'link', 'set', 'tdlhub0', 'up']);
    for (let i = 0; i < nodeCount; i++) {
      const ns = (await this.pool.add(`n${i}`)).name;
      const ip = net.node(i);
      await runOk(['ip', '-n', hub, 'link', 'add', `tdlport${i}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', `/var/run/netns/${ns}`]);
      await runOk(['ip', '-n', hub, 'link', 'set', `tdlport${i}`, 'master', 'tdlhub0', 'up']);
      await this.#addAddress(ns, ip, 'eth0');
      const ip6 = this.underlay === 'dual' ? UNDERLAY[6].node(i) : undefined;
      if (ip6 !== undefined) await this.#addAddress(ns, ip6, 'eth0', 6);
      await runOk(['ip', '-n', ns, 'link', 'set', 'eth0', 'up']);
      this.nodes.push({ netns: ns, ip, ...(ip6 !== undefined ? { ip6 } : {}) });
    }
    this.etcdDir = await mkdtemp(join(tmpdir(), 'tdl-etcd-'));
    const peer = 'http://127.0.0.1:2380';
    const argv = [
      `--net=/var/run/netns/${hub}`, '--', ETCD_BIN,
      '--name', 'tdl-hub', '--data-dir', this.etcdDir,
      '--listen-client-urls', this.etcdEndpoint, '--advertise-client-urls', this.etcdEndpoint,
      '--listen-peer-urls', peer, '--initial-advertise-peer-urls', peer, '--initial-cluster', `tdl-hub=${peer}`,
    ];
    const etcd = spawn('nsenter', argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.etcd = etcd;
    await new Promise<void>((resolve, reject) => {
      let log = '';
      const timer = setTimeout(() => reject(new Error(`etcd did not become ready:\n${log.slice(-2000)}`)), 20_000);
      const onData = (c: Buffer) => {
        log += c.toString();
        if (log.includes('ready to serve client requests')) {
          clearTimeout(timer);
          resolve();
        }
      };
      etcd.stdout!.on('data', onData);
      etcd.stderr!.on('data', onData);
      etcd.on('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`etcd exited ${code}:\n${log.slice(-2000)}`));
      });
    });
  }

  /** An address of the cluster network on a device: IPv4 /24, or IPv6 /64 with nodad (usable at once: agents read them at start). */
  async #addAddress(ns: string, ip: string, dev: string, family: 4 | 6 = this.underlay === 6 ? 6 : 4): Promise<void> {
    await runOk(['ip', '-n', ns, 'addr', 'add', `${ip}/${UNDERLAY[family].length}`, 'dev', dev, ...(family === 6 ? ['nodad'] : [])]);
  }

  /**
   * Another host on the cluster network that is no node (a server outside the
   * cluster, an attacker on the underlay): a namespace on the hub bridge with
   * `ip` (of the underlay's family) on its eth0, and `ip6` beside it on a
   * dual-stack cluster network.
   */
  async addUnderlayHost(suffix: string, ip: string, ip6?: string): Promise<{ netns: string; netnsPath: string }> {
    const ns = await this.pool.add(suffix);
    const port = `tdlhost${this.hostSeq++}`;
    await runOk(['ip', '-n', this.hub, 'link', 'add', port, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.path]);
    await runOk(['ip', '-n', this.hub, 'link', 'set', port, 'master', 'tdlhub0', 'up']);
    await this.#addAddress(ns.name, ip, 'eth0', ip.includes(':') ? 6 : 4);
    if (ip6 !== undefined) await this.#addAddress(ns.name, ip6, 'eth0', 6);
    await runOk(['ip', '-n', ns.name, 'link', 'set', 'eth0', 'up']);
    return { netns: ns.name, netnsPath: ns.path };
  }

  async cleanup(): Promise<void> {
    if (this.etcd && this.etcd.exitCode === null) {
      const exited = new Promise((r) => this.etcd!.once('exit', r));
      this.etcd.kill('SIGKILL');
      await exited;
    }
    await this.pool.cleanup();
    if (this.etcdDir) await rm(this.etcdDir, { recursive: true, force: true });
  }
}
