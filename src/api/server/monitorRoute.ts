/**
 * GET /v1/monitor: the datapath's events as NDJSON (NdjsonStream), for as
 * long as the client stays. Streams are ended before the server closes
 * (preClose), or close() would wait for them.
 */
import type { FastifyInstance } from 'fastify';
import { AgentError } from '../errors.js';
import type { QueryParams } from '../types.js';
import { isKernelError } from '../../datapath/kernel/errors.js';
import type { Logger } from '../../logging/logger.js';
import type { MonitorEvent, MonitorFilter, MonitorSubscription } from '../../monitor/index.js';
import { NdjsonStream } from './ndjsonStream.js';

/** What the route needs: a MonitorHub. */
export interface MonitorApi {
  subscribe(filter: MonitorFilter, onEvent: (e: MonitorEvent) => void, onEnd: (reason: string) => void): Promise<MonitorSubscription>;
}

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
    // The stream exists once subscribed; events before that wait in `pending`.
    const out: { stream?: NdjsonStream } = {};
    let ended = false;
    const pending: MonitorEvent[] = [];
    const write = (e: MonitorEvent): void => {
      if (ended) return;
      if (out.stream === undefined) pending.push(e);
      else out.stream.write(e);
    };
    let subscription: MonitorSubscription | undefined;
    const end = (): void => {
      if (ended) return;
      ended = true;
      open.delete(end);
      if (out.stream !== undefined && out.stream.skipped > 0) log.warn({ skipped: out.stream.skipped, filter }, 'monitor client too slow: events skipped');
      // Before the stream started, the handler still owns the answer.
      out.stream?.end();
      void subscription?.close();
    };
    try {
      // Subscribed before the stream starts: a ring buffer that cannot be read is an ordinary error answer.
      subscription = await monitor.subscribe(filter, write, end);
    } catch (err) {
      if (isKernelError(err, 'ENOENT')) throw new AgentError('CONFLICT', `the datapath's events ring buffer is not pinned: ${(err as Error).message}`, '', undefined, { cause: err });
      throw err;
    }
    open.add(end);
    const stream = new NdjsonStream(reply, end);
    out.stream = stream;
    for (const e of pending.splice(0)) stream.write(e);
    if (ended) stream.end();
  });
}
