import { type ChildProcess, spawn } from 'node:child_process';

/**
 * What the kernel announces about routes, addresses and neighbours in one
 * network namespace while the watch runs (`ip -o monitor route address neigh`
 * under nsenter): a route or address written, even with the value it already
 * had, shows as an event (an IPv6 route "replaced" by an equal one is swapped
 * for a new one and announced; an address replaced is announced), and so does
 * a neighbour entry deleted. Neighbour state changes the kernel makes on its
 * own (REACHABLE to STALE and back, its GC deleting unused STALE and NOARP
 * entries) are not changes anyone made, nor are the
 * IPv6 link-local addresses (and their local and anycast routes) the kernel
 * announces when duplicate address detection completes on a new device:
 * `changes()` leaves both out (but not a route via a link-local next hop,
 * as tendril's IPv6 ClusterIP and tunnel routes go).
 */
export class RtnetlinkWatch {
  #out = '';
  #err = '';
  readonly #exited: Promise<void>;

  private constructor(private readonly child: ChildProcess) {
    child.stdout!.on('data', (c: Buffer) => (this.#out += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (this.#err += c.toString()));
    this.#exited = new Promise((r) => child.once('exit', () => r()));
  }

  /** Starts watching; resolves once `ip` is subscribed (it prints nothing until an event, so a short settle). */
  static async start(netnsPath: string): Promise<RtnetlinkWatch> {
    const child = spawn('nsenter', [`--net=${netnsPath}`, '--', 'ip', '-o', 'monitor', 'label', 'route', 'address', 'neigh'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const w = new RtnetlinkWatch(child);
    await new Promise((r) => setTimeout(r, 200));
    if (child.exitCode !== null) throw new Error(`ip monitor in ${netnsPath} exited: ${w.#err}`);
    return w;
  }

  /** Every event line seen so far. */
  get lines(): string[] {
    return this.#out.split('\n').filter((l) => l.trim() !== '');
  }

  /** Route and address events, and neighbour deletions: what someone wrote or flushed. */
  changes(): string[] {
    // A link-local address, or a route TO a link-local destination (local, anycast, the device's
    // fe80::/64); a route that only goes VIA a link-local next hop (tendril_host's) is someone's write.
    const linkLocal = /^\[ADDR\].*\binet6 fe80::|^\[ROUTE\](?:Deleted )?(?:(?:local|anycast|multicast) )?fe80::/;
    // The kernel's neighbour GC deletes, by itself, entries unused past gc_stale_time: multicast
    // mappings (NOARP) and STALE entries, as a suite running over a minute sees.
    const collected = /^\[NEIGH\]Deleted .* (NOARP|STALE)\s*$/;
    return this.lines.filter((l) => (!/^\[NEIGH\]/.test(l) || /^\[NEIGH\]Deleted /.test(l) || /\bFAILED\b/.test(l)) && !linkLocal.test(l) && !collected.test(l));
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGTERM');
    await this.#exited;
  }
}
