/**
 * The client side of GET /v1/monitor: one request held open, NDJSON read
 * line by line. Errors before the stream starts (409 without the eBPF
 * datapath, 400) come back as AgentResponseError like any other call.
 */
import { request } from 'node:http';
import { createInterface } from 'node:readline';
import type { ErrorResponse, QueryParams } from '../api/types.js';
import type { MonitorEvent } from './types.js';

export interface MonitorStreamOptions {
  /** Ends the stream (the CLI's Ctrl-C). */
  signal?: AbortSignal;
}

type MonitorQuery = QueryParams<'monitorEvents'>;

function queryOf(q: MonitorQuery): string {
  const params = new URLSearchParams();
  for (const t of q.type ?? []) params.append('type', t);
  if (q.endpoint !== undefined) params.set('endpoint', String(q.endpoint));
  if (q.identity !== undefined) params.set('identity', String(q.identity));
  const text = params.toString();
  return text === '' ? '' : `?${text}`;
}

/**
 * Streams events to `onEvent` until the agent ends the stream (resolves), the
 * signal aborts (resolves), or the connection fails (rejects). `fail` turns
 * an error answer into the caller's error type.
 */
export function streamMonitor(
  socketPath: string,
  query: MonitorQuery,
  onEvent: (e: MonitorEvent) => void,
  opts: MonitorStreamOptions,
  fail: { status: (status: number, body: ErrorResponse | undefined, text: string) => Error; connect: (err: NodeJS.ErrnoException) => Error },
): Promise<void> {
  return new Promise((resolve, reject) => {
    if (opts.signal?.aborted) {
      resolve();
      return;
    }
    const req = request({ socketPath, method: 'GET', path: `/v1/monitor${queryOf(query)}`, headers: { accept: 'application/x-ndjson' } }, (res) => {
      if (res.statusCode !== 200) {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let body: ErrorResponse | undefined;
          try {
            body = JSON.parse(text) as ErrorResponse;
          } catch {
            body = undefined;
          }
          reject(fail.status(res.statusCode ?? 0, body, text));
        });
        return;
      }
      const lines = createInterface({ input: res, crlfDelay: Infinity });
      lines.on('line', (line) => {
        if (line.trim() === '') return;
        let e: MonitorEvent;
        try {
          e = JSON.parse(line) as MonitorEvent;
        } catch {
          reject(new Error(`the agent sent a monitor line that is not JSON: ${line.slice(0, 200)}`));
          req.destroy();
          return;
        }
        onEvent(e);
      });
      res.on('end', () => resolve());
      // readline passes its input's errors on (an aborted response among them).
      const failed = (err: Error): void => (opts.signal?.aborted ? resolve() : reject(err));
      res.on('error', failed);
      lines.on('error', failed);
    });
    req.on('error', (err: NodeJS.ErrnoException) => (opts.signal?.aborted ? resolve() : reject(fail.connect(err))));
    opts.signal?.addEventListener('abort', () => {
      req.destroy();
      resolve();
    });
    req.end();
  });
}
