import { stat, statfs } from 'node:fs/promises';
import { DatapathError, type NetnsKind } from '../types.js';

/** statfs(2) f_type of the namespace filesystem (linux/magic.h NSFS_MAGIC). */
export const NSFS_MAGIC = 0x6e736673;

/** The node's own network namespaces: the agent's, and the init namespace. */
const NODE_NAMESPACE_PATHS = ['/proc/self/ns/net', '/proc/1/ns/net'];

const fileId = (s: { dev: bigint; ino: bigint }) => `${s.dev}:${s.ino}`;

let nodeIds: Promise<Set<string>> | undefined;

/** Device and inode of the node's namespaces, read once: the agent never leaves its namespace. */
function nodeNamespaceIds(): Promise<Set<string>> {
  nodeIds ??= (async () => {
    const ids = new Set<string>();
    for (const p of NODE_NAMESPACE_PATHS) {
      try {
        ids.add(fileId(await stat(p, { bigint: true })));
      } catch (err) {
        // Without ptrace rights on pid 1 (an agent in a container) the init namespace
        // cannot be named; the agent's own namespace always can.
        const code = (err as NodeJS.ErrnoException).code;
        if (p === NODE_NAMESPACE_PATHS[0] || (code !== 'EACCES' && code !== 'EPERM' && code !== 'ENOENT')) throw err;
      }
    }
    return ids;
  })();
  // A failed read is not remembered: the next call tries again.
  nodeIds.catch(() => (nodeIds = undefined));
  return nodeIds;
}

/**
 * What a pod namespace path names, by stat(2) and statfs(2) only: neither
 * opens the file, so a FIFO given as a namespace cannot block the agent.
 * A namespace file is on nsfs; the same device and inode as the node's
 * namespace means it is the node's, whatever the path says.
 */
export async function classifyNetnsPath(path: string): Promise<NetnsKind> {
  try {
    const st = await stat(path, { bigint: true });
    if (!st.isFile()) return 'not-netns';
    // An empty file is where `ip netns add` and runtimes bind-mount a namespace: seen empty, the mount is in another mount namespace.
    if ((await statfs(path)).type !== NSFS_MAGIC) return st.size === 0n ? 'unmounted' : 'not-netns';
    return (await nodeNamespaceIds()).has(fileId(st)) ? 'node' : 'pod';
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return 'missing';
    throw new DatapathError('failed', `cannot inspect network namespace ${path}: ${(err as Error).message}`);
  }
}
