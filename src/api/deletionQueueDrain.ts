import { join } from 'node:path';
import type { Logger } from '../logging/logger.js';
import { DeletionQueue, isRefused } from './deletionQueue.js';
import { AgentError } from './errors.js';
import type { CniRequest, CniResponse } from './types.js';

/** What draining needs of the agent: the CNI verbs, and the endpoint an attachment has now. */
export interface DeletionQueueTarget {
  cni: { handle(req: CniRequest): Promise<CniResponse> };
  /** The attachment's endpoint, with when it was created (ISO 8601); undefined when it has none. */
  endpointOf(containerId: string, ifName: string): { id: number; createdAt: string } | undefined;
}

/**
 * The sockets whose deletion queues the agent drains: its socket's, and the
 * state dir's default one (a plugin whose netconf named no socket queues there).
 */
export function deletionQueueSockets(socket: string, stateDir: string): string[] {
  return [...new Set([socket, join(stateDir, 'tendril.sock')])];
}

/**
 * DELs the plugin queued while the agent was unreachable. They run as root,
 * so only a queue and entries root alone could have written are trusted
 * (see deletionQueue.ts); anything else is logged and left in place for an
 * operator to look at, since something wrote where it should not be able to.
 */
export async function drainDeletionQueues(sockets: readonly string[], target: DeletionQueueTarget, log: Logger): Promise<void> {
  for (const socket of sockets) {
    const opened = await DeletionQueue.open(socket);
    if (opened.kind === 'absent') continue;
    if (opened.kind === 'refused') {
      log.error({ dir: opened.dir, reason: opened.reason }, 'deletion queue not trusted, nothing in it is run: it must be a directory owned by root with mode 0700');
      continue;
    }
    try {
      await drainQueue(opened.queue, target, log);
    } finally {
      await opened.queue.close();
    }
  }
}

async function drainQueue(queue: DeletionQueue, target: DeletionQueueTarget, log: Logger): Promise<void> {
  for (const q of await queue.list()) {
    if (isRefused(q)) {
      log.error({ file: q.file, reason: q.refused }, 'queued deletion not trusted, left in place: entries must be regular files owned by root, not writable by others');
      continue;
    }
    if (q.request === undefined) {
      log.error({ file: q.file }, 'unreadable queued deletion; dropping it');
      await queue.remove(q.name);
      continue;
    }
    const req = q.request as CniRequest;
    // A stuck agent may have done this DEL itself once it ran again (DEL is idempotent); if the
    // runtime has since added the attachment again, this older request must not remove it.
    const current = typeof req.containerId === 'string' && typeof req.ifName === 'string' ? target.endpointOf(req.containerId, req.ifName) : undefined;
    if (current && Date.parse(current.createdAt) > q.queuedAtMs) {
      log.warn({ file: q.file, endpoint: current.id, createdAt: current.createdAt }, 'queued deletion is older than the endpoint it names; dropping it');
      await queue.remove(q.name);
      continue;
    }
    try {
      await target.cni.handle({ ...req, command: 'DEL' });
      log.info({ file: q.file }, 'queued deletion done');
      await queue.remove(q.name);
    } catch (err) {
      const e = err instanceof AgentError ? err : undefined;
      if (e && e.httpStatus < 500) {
        log.error({ file: q.file, err }, 'queued deletion is invalid; dropping it');
        await queue.remove(q.name);
      } else {
        log.error({ file: q.file, err }, 'queued deletion failed; kept for the next start');
      }
    }
  }
}

/** Entries waiting in the deletion queues (trusted or not: both wait). */
export async function deletionQueueDepth(sockets: readonly string[]): Promise<number> {
  let depth = 0;
  for (const socket of sockets) {
    const opened = await DeletionQueue.open(socket);
    if (opened.kind !== 'open') continue;
    try {
      depth += (await opened.queue.list()).length;
    } finally {
      await opened.queue.close();
    }
  }
  return depth;
}
