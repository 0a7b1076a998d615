import { readdir, readFile, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';

/**
 * DEL requests the plugin could not deliver because the agent was down
 * (Cilium's deletion fallback). The queue lives beside the agent's socket so
 * the plugin finds it from the same netconf field; the agent drains it on
 * start. tendril-cni writes it (src/plugin/native/queue.c): in this
 * directory (mode 0700), one CniRequest JSON per file named
 * `<ms since epoch>-<8 hex>.json` (mode 0600), written as `.<name>.tmp` and
 * renamed into place, so a reader never sees half a file.
 */
export function deletionQueueDir(socketPath: string): string {
  return join(dirname(socketPath), 'deletion-queue');
}

export interface QueuedDeletion {
  file: string;
  request: unknown;
}

/** Queued requests oldest first; unreadable files are returned with request undefined. */
export async function listQueuedDeletions(socketPath: string): Promise<QueuedDeletion[]> {
  const dir = deletionQueueDir(socketPath);
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const out: QueuedDeletion[] = [];
  for (const name of names.filter((n) => n.endsWith('.json') && !n.startsWith('.')).sort()) {
    const file = join(dir, name);
    let request: unknown;
    try {
      request = JSON.parse(await readFile(file, 'utf8'));
    } catch {
      request = undefined; // reported by the caller, which owns the logger
    }
    out.push({ file, request });
  }
  return out;
}

export async function removeQueuedDeletion(file: string): Promise<void> {
  await rm(file, { force: true });
}
