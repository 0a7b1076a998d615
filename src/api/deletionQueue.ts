import { randomBytes } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { CniRequest } from './types.js';

/**
 * DEL requests the plugin could not deliver because the agent was down
 * (Cilium's deletion fallback). The queue lives beside the agent's socket so
 * the plugin finds it from the same netconf field; the agent drains it on start.
 */
export function deletionQueueDir(socketPath: string): string {
  return join(dirname(socketPath), 'deletion-queue');
}

export async function enqueueDeletion(socketPath: string, req: CniRequest): Promise<string> {
  const dir = deletionQueueDir(socketPath);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const name = `${Date.now()}-${randomBytes(4).toString('hex')}.json`;
  const tmp = join(dir, `.${name}.tmp`);
  await writeFile(tmp, JSON.stringify(req), { mode: 0o600 });
  await rename(tmp, join(dir, name));
  return join(dir, name);
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
