import { readdir, readFile, readlink } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { OwnershipError } from '../errors/ownershipError.js';

/** Held while an agent owns its node; released by `release` or, whatever happens, by the process's death. */
export interface NodeClaim {
  release(): Promise<void>;
}

/** Makes an agent the only one on its node; `claim` throws OwnershipError('NODE_OWNED') when another holds it. */
export interface NodeLock {
  claim(): Promise<NodeClaim>;
}

export const DEFAULT_NODE_LOCK_NAME = 'tendril-agent';

/**
 * The node is a network namespace, and an abstract unix socket is the lock
 * that has exactly that scope: its name lives in the namespace of the socket
 * that binds it (the agent's main thread never leaves the node's namespace),
 * no file or mount namespace is involved, and the kernel frees the name when
 * the process dies, even by SIGKILL, so a crash leaves nothing stale.
 */
export class NetnsNodeLock implements NodeLock {
  readonly name: string;

  constructor(opts: { name?: string } = {}) {
    this.name = opts.name ?? DEFAULT_NODE_LOCK_NAME;
  }

  async claim(): Promise<NodeClaim> {
    // Nobody is served here: a connection only means someone looked.
    const server = createServer((s) => s.destroy());
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen({ path: `\0${this.name}` }, () => {
          server.off('error', reject);
          resolve();
        });
      });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
      throw new OwnershipError('NODE_OWNED', await this.ownedMessage(), { cause: err });
    }
    // The claim must not keep an otherwise finished process alive.
    server.unref();
    return { release: () => closeServer(server) };
  }

  private async ownedMessage(): Promise<string> {
    const netns = await readlink('/proc/self/ns/net').catch(() => 'unknown');
    const pids = await abstractSocketHolders(this.name);
    const holder = pids.length > 0 ? `pid ${pids.join(', ')} holds @${this.name}` : `a process holds @${this.name} (its pid could not be found)`;
    return `another agent owns this node (network namespace ${netns}): ${holder}; nothing was changed`;
  }
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve, reject) => server.close((err) => (err ? reject(err) : resolve())));
}

/**
 * The pids holding the listening abstract socket `@name` of this network
 * namespace: its inode from /proc/net/unix (which shows the reader's
 * namespace), then the processes with an fd on that inode.
 */
export async function abstractSocketHolders(name: string): Promise<number[]> {
  const inodes = new Set<string>();
  const ACCEPTING = 0x10000; // __SO_ACCEPTCON: a listening socket
  for (const line of (await readFile('/proc/net/unix', 'utf8')).split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    // Num RefCount Protocol Flags Type St Inode Path
    // Node binds an abstract name padded with NULs to sun_path's full length; the file shows each NUL as '@'.
    if (f.length >= 8 && f[7]!.replace(/@+$/, '') === `@${name}` && (parseInt(f[3]!, 16) & ACCEPTING) !== 0) inodes.add(f[6]!);
  }
  if (inodes.size === 0) return [];
  const targets = new Set([...inodes].map((i) => `socket:[${i}]`));
  const holders: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    // A process may exit, or hide its fds, while we look: it is then simply not a holder we can name.
    const fds = await readdir(`/proc/${entry}/fd`).catch(() => []);
    for (const fd of fds) {
      const target = await readlink(`/proc/${entry}/fd/${fd}`).catch(() => '');
      if (targets.has(target)) {
        holders.push(Number(entry));
        break;
      }
    }
  }
  return holders;
}
