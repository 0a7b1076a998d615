/**
 * The client side of the agent's NDJSON streams (GET /v1/monitor, GET
 * /v1/flows): one request held open, read line by line. The agent is
 * reached on its unix socket, or (a node's flows for a relay) over TCP or
 * TLS with a bearer token. Errors before the stream starts (409 without the
 * eBPF datapath, 400) come back through `fail.status` like any other call.
 */
import { type ClientRequest, type IncomingMessage, request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { ErrorResponse } from '../api/types.js';

export interface NdjsonStreamOptions {
  /** Ends the stream (the CLI's Ctrl-C). */
  signal?: AbortSignal;
}

/** Where the stream's server is: the agent's unix socket, or an HTTP(S) base URL (`https://node-a:4245`). */
export type StreamTarget = { socketPath: string } | { url: URL; token?: string; ca?: string | Buffer; cert?: string | Buffer; key?: string | Buffer; timeoutMs?: number };

export interface StreamFailures {
  status: (status: number, body: ErrorResponse | undefined, text: string) => Error;
  connect: (err: NodeJS.ErrnoException) => Error;
}

/** The query string of repeated parameters (`?type=drop&type=trace`), empty when there are none. */
export function queryString(params: Iterable<[string, string]>): string {
  const text = new URLSearchParams([...params]).toString();
  return text === '' ? '' : `?${text}`;
}

function open(target: StreamTarget, path: string, onResponse: (res: IncomingMessage) => void, accept = 'application/x-ndjson'): ClientRequest {
  const headers: Record<string, string> = { accept };
  if ('socketPath' in target) return httpRequest({ socketPath: target.socketPath, method: 'GET', path, headers }, onResponse);
  const { url } = target;
  if (target.token !== undefined) headers.authorization = `Bearer ${target.token}`;
  const base = url.pathname.replace(/\/$/, '');
  const opts = { host: url.hostname.replace(/^\[|\]$/g, ''), port: url.port, method: 'GET', path: `${base}${path}`, headers, ...(target.timeoutMs !== undefined ? { timeout: target.timeoutMs } : {}) };
  if (url.protocol === 'https:') {
    // A client certificate for a server that asks for one (mTLS).
    const tls = { ...(target.ca !== undefined ? { ca: target.ca } : {}), ...(target.cert !== undefined && target.key !== undefined ? { cert: target.cert, key: target.key } : {}) };
    return httpsRequest({ ...opts, ...tls }, onResponse);
  }
  if (url.protocol === 'http:') return httpRequest(opts, onResponse);
  throw new Error(`unsupported scheme ${url.protocol} in ${url.href} (use http: or https:)`);
}

/**
 * Streams the lines of GET `path` (with its query) to `onLine` until the
 * server ends the stream (resolves), the signal aborts (resolves), or the
 * connection fails (rejects).
 */
export function streamNdjson<T>(target: StreamTarget, path: string, onLine: (value: T, text: string) => void, opts: NdjsonStreamOptions, fail: StreamFailures): Promise<void> {
  return new Promise((resolve, reject) => {
    if (opts.signal?.aborted) {
      resolve();
      return;
    }
    let req: ClientRequest;
    try {
      req = open(target, path, (res) => {
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
        // The request's timeout guards the connection and the answer's start; a followed stream may be quiet for long.
        req.setTimeout(0);
        // Split by hand, not with readline: a relay reads tens of thousands of lines a second, and readline's per-line events cost more than the lines.
        res.setEncoding('utf8');
        let partial = '';
        let bad = false;
        const take = (line: string): void => {
          if (bad || line.trim() === '') return;
          let value: T;
          try {
            value = JSON.parse(line) as T;
          } catch {
            bad = true;
            reject(new Error(`the server sent a line that is not JSON: ${line.slice(0, 200)}`));
            req.destroy();
            return;
          }
          onLine(value, line);
        };
        res.on('data', (chunk: string) => {
          let start = 0;
          for (let nl = chunk.indexOf('\n'); nl >= 0; nl = chunk.indexOf('\n', start)) {
            const piece = chunk.slice(start, nl);
            start = nl + 1;
            const line = partial === '' ? piece : partial + piece;
            partial = '';
            take(line.endsWith('\r') ? line.slice(0, -1) : line);
          }
          partial += chunk.slice(start);
        });
        res.on('end', () => {
          if (partial !== '') take(partial);
          resolve();
        });
        const failed = (err: Error): void => (opts.signal?.aborted ? resolve() : reject(err));
        res.on('error', failed);
      });
    } catch (err) {
      reject(err as Error);
      return;
    }
    req.on('timeout', () => req.destroy(Object.assign(new Error(`no answer within ${'timeoutMs' in target ? target.timeoutMs : 0} ms`), { code: 'ETIMEDOUT' })));
    req.on('error', (err: NodeJS.ErrnoException) => (opts.signal?.aborted ? resolve() : reject(fail.connect(err))));
    opts.signal?.addEventListener('abort', () => {
      req.destroy();
      resolve();
    });
    req.end();
  });
}

/** One GET answered with JSON (a relay asking a node for its policies): the status and the text; a connection failure rejects. */
export function getText(target: StreamTarget, path: string, signal?: AbortSignal): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    let req: ClientRequest;
    try {
      req = open(
        target,
        path,
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
          res.on('error', reject);
        },
        'application/json',
      );
    } catch (err) {
      reject(err as Error);
      return;
    }
    req.on('timeout', () => req.destroy(Object.assign(new Error(`no answer within ${'timeoutMs' in target ? target.timeoutMs : 0} ms`), { code: 'ETIMEDOUT' })));
    req.on('error', reject);
    signal?.addEventListener('abort', () => req.destroy(new Error('aborted')));
    req.end();
  });
}
