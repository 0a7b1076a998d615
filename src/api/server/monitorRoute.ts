/**
 * GET /v1/monitor: the datapath's events as NDJSON, for as long as the client
 * stays. The response is written on the raw socket (reply.hijack): a stream
 * has no body fastify could check against the document, so only the error
 * answers before it starts go through the ordinary path. Streams are ended
 * before the server closes (preClose), or close() would wait for them.
 */
import type { FastifyInstance } from 'fastify';
import { AgentError } from '../errors.js';
import type { QueryParams } from '../types.js';
import { isKernelError } from '../../datapath/kernel/errors.js';
import type { Logger } from '../../logging/logger.js';
import type { MonitorEvent, MonitorFilter, MonitorSubscription } from '../../monitor/index.js';

/** What the route needs: a MonitorHub. */
export interface MonitorApi {
  subscribe(filter: MonitorFilter, onEvent: (e: MonitorEvent) => void, onEnd: (reason: string) => void): Promise<MonitorSubscription>;
}

/** A client this far behind (bytes queued in its socket) misses events instead of growing the agent's memory. */
const MAX_QUEUED_BYTES = 4 << 20;

export const NO_MONITOR = 'the eBPF datapath is not running on this node (the agent uses the routing datapath): there are no datapath events to monitor';

export function registerMonitorRoute(app: FastifyInstance, monitor: MonitorApi | undefined, log: Logger): void {
  const open = new Set<() => void>();
  app.addHook('preClose', async () => {
    for (const end of [...open]) end();
  });

  app.get('/v1/monitor', async (req, reply) => {
    if (!monitor) throw new AgentError('CONFLICT', NO_MONITOR);
    const q = req.query as QueryParams<'monitorEvents'>;
    const filter: MonitorFilter = {
      ...(q.type && q.type.length > 0 ? { types: q.type } : {}),
      ...(q.endpoint !== undefined ? { endpoint: q.endpoint } : {}),
      ...(q.identity !== undefined ? { identity: q.identity } : {}),
    };
    const raw = reply.raw;
    let started = false;
    let ended = false;
    let skipped = 0;
    const pending: MonitorEvent[] = [];
    const write = (e: MonitorEvent): void => {
      if (ended) return;
      if (!started) {
        pending.push(e);
        return;
      }
      if (raw.writableLength > MAX_QUEUED_BYTES) {
        skipped++;
        return;
      }
      raw.write(`${JSON.stringify(e)}\n`);
    };
    let subscription: MonitorSubscription | undefined;
    const end = (): void => {
      if (ended) return;
      ended = true;
      open.delete(end);
      if (skipped > 0) log.warn({ skipped, filter }, 'monitor client too slow: events skipped');
      // Before the stream started, the handler still owns the answer.
      if (started && !raw.writableEnded) raw.end();
      void subscription?.close();
    };
    try {
      // Subscribed before the stream starts: a ring buffer that cannot be read is an ordinary error answer.
      subscription = await monitor.subscribe(filter, write, end);
    } catch (err) {
      if (isKernelError(err, 'ENOENT')) throw new AgentError('CONFLICT', `the datapath's events ring buffer is not pinned: ${(err as Error).message}`, '', undefined, { cause: err });
      throw err;
    }
    reply.hijack();
    open.add(end);
    raw.on('close', end);
    raw.writeHead(200, { 'content-type': 'application/x-ndjson; charset=utf-8', 'cache-control': 'no-store' });
    // The client learns the subscription is in place before the first event.
    raw.flushHeaders();
    started = true;
    for (const e of pending.splice(0)) write(e);
    if (ended) raw.end();
  });
}
