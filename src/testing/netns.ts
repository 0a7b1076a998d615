import { randomBytes } from 'node:crypto';
import { run, runOk } from './run.js';

/**
 * Test network namespaces named with the `tdl` prefix so a leak is easy to spot.
 * A NetnsPool removes everything it created, also when the test failed.
 */
export class NetnsPool {
  private readonly names: string[] = [];
  readonly prefix: string;

  constructor(tag: string) {
    this.prefix = `tdl${tag}${randomBytes(2).toString('hex')}`;
  }

  async add(suffix: string): Promise<{ name: string; path: string }> {
    const name = `${this.prefix}${suffix}`;
    await runOk(['ip', 'netns', 'add', name]);
    this.names.push(name);
    await runOk(['ip', '-n', name, 'link', 'set', 'lo', 'up']);
    return { name, path: `/var/run/netns/${name}` };
  }

  /** Runs a command inside a namespace; nsenter keeps /sys as it is (unlike `ip netns exec`). */
  exec(ns: string, argv: readonly string[]): ReturnType<typeof run> {
    return run(['nsenter', `--net=/var/run/netns/${ns}`, '--', ...argv]);
  }

  async cleanup(): Promise<void> {
    for (const name of this.names.splice(0).reverse()) await run(['ip', 'netns', 'del', name]);
  }
}

/** The IPv4 addresses (CIDR) on an interface inside a namespace. */
export async function addressesIn(pool: NetnsPool, ns: string, ifName: string): Promise<string[]> {
  const r = await pool.exec(ns, ['ip', '-j', '-4', 'addr', 'show', 'dev', ifName]);
  if (r.code !== 0) return [];
  const parsed = JSON.parse(r.stdout) as Array<{ addr_info: Array<{ local: string; prefixlen: number }> }>;
  return parsed.flatMap((l) => l.addr_info.map((a) => `${a.local}/${a.prefixlen}`));
}

/** Whether a link exists inside a namespace. */
export async function linkExists(pool: NetnsPool, ns: string, ifName: string): Promise<boolean> {
  return (await pool.exec(ns, ['ip', 'link', 'show', 'dev', ifName])).code === 0;
}

/**
 * Waits until a socket in namespace `ns` is bound to `proto` `port` (as `ss` lists it): a server started just before
 * must have its socket before the first packet comes (a fixed pause was too short on a busy machine).
 */
export async function untilListening(ns: string, proto: 'tcp' | 'udp', port: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await run(['nsenter', `--net=/var/run/netns/${ns}`, '--', 'ss', '-Hln', proto === 'tcp' ? '-t' : '-u', `sport = :${port}`]);
    if (r.stdout.trim() !== '') return;
    if (Date.now() > deadline) throw new Error(`nothing listens on ${proto} ${port} in ${ns} after ${timeoutMs} ms`);
    await new Promise((done) => setTimeout(done, 50));
  }
}
