import { request } from 'node:http';
import type { ErrorResponse } from '../api/errors.js';
import { CNI_EXIT_CODE_HEADER, type CniRequest, type Health, type IpamList } from '../api/types.js';
import { CniError } from '../cni/errors.js';
import type { AnyResult } from '../cni/types.js';

/** The agent's socket could not be reached at all (not running, wrong path, no permission). */
export class AgentUnreachableError extends Error {
  constructor(
    readonly socketPath: string,
    override readonly cause: Error,
  ) {
    super(`cannot reach the tendril agent at ${socketPath}: ${cause.message}`);
    this.name = 'AgentUnreachableError';
  }
}

/** The agent answered with an error body. */
export class AgentResponseError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorResponse,
  ) {
    super(body.details ? `${body.message}: ${body.details}` : body.message);
    this.name = 'AgentResponseError';
  }
}

export interface AgentClientOptions {
  socketPath: string;
  /** Per-request timeout; ADD waits for the endpoint to be in force, so it is generous. */
  timeoutMs?: number;
}

const UNREACHABLE_CODES = new Set(['ENOENT', 'ECONNREFUSED', 'EACCES', 'ENOTSOCK', 'ECONNRESET']);

/** Typed client for the agent's REST API over its unix socket. */
export class AgentClient {
  readonly socketPath: string;
  private readonly timeoutMs: number;

  constructor(opts: AgentClientOptions) {
    this.socketPath = opts.socketPath;
    this.timeoutMs = opts.timeoutMs ?? 120_000;
  }

  request<T>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<T> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    return new Promise((resolve, reject) => {
      const req = request(
        {
          socketPath: this.socketPath,
          method,
          path: `/v1${path}`,
          headers: {
            ...headers,
            ...(payload !== undefined ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}),
          },
          timeout: this.timeoutMs,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            let parsed: unknown = undefined;
            if (text !== '') {
              try {
                parsed = JSON.parse(text);
              } catch {
                reject(new Error(`agent answered ${res.statusCode} with a body that is not JSON: ${text.slice(0, 200)}`));
                return;
              }
            }
            const status = res.statusCode ?? 0;
            if (status >= 200 && status < 300) resolve(parsed as T);
            else reject(new AgentResponseError(status, normaliseError(status, parsed)));
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`request ${method} ${path} timed out after ${this.timeoutMs} ms`)));
      req.on('error', (err: NodeJS.ErrnoException) => {
        reject(err.code && UNREACHABLE_CODES.has(err.code) ? new AgentUnreachableError(this.socketPath, err) : err);
      });
      req.end(payload);
    });
  }

  /**
   * A CNI call as tendril-cni makes it (POST /cni answers the plugin's stdout
   * and exit code): resolves with the result ADD prints, in the config's
   * version, or undefined for the verbs that print nothing; rejects with the
   * CniError the plugin would print.
   */
  cni(req: CniRequest): Promise<AnyResult | undefined> {
    const payload = JSON.stringify(req);
    return new Promise((resolve, reject) => {
      const r = request(
        {
          socketPath: this.socketPath,
          method: 'POST',
          path: '/v1/cni',
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
          timeout: this.timeoutMs,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            const exitCode = res.headers[CNI_EXIT_CODE_HEADER];
            let parsed: unknown;
            try {
              parsed = text === '' ? undefined : JSON.parse(text);
            } catch {
              reject(new Error(`agent answered ${res.statusCode} with a body that is not JSON: ${text.slice(0, 200)}`));
              return;
            }
            if (res.statusCode !== 200 || (exitCode !== '0' && exitCode !== '1')) {
              reject(new AgentResponseError(res.statusCode ?? 0, normaliseError(res.statusCode ?? 0, parsed)));
            } else if (exitCode === '0') {
              resolve(parsed as AnyResult | undefined);
            } else {
              reject(CniError.fromJson(parsed) ?? new Error(`agent answered exit code 1 without a CNI error: ${text.slice(0, 200)}`));
            }
          });
        },
      );
      r.on('timeout', () => r.destroy(new Error(`request POST /cni timed out after ${this.timeoutMs} ms`)));
      r.on('error', (err: NodeJS.ErrnoException) => {
        reject(err.code && UNREACHABLE_CODES.has(err.code) ? new AgentUnreachableError(this.socketPath, err) : err);
      });
      r.end(payload);
    });
  }

  health(): Promise<Health> {
    return this.request('GET', '/healthz');
  }

  listEndpoints<T = unknown[]>(): Promise<T> {
    return this.request('GET', '/endpoint');
  }

  getEndpoint<T = unknown>(id: string): Promise<T> {
    return this.request('GET', `/endpoint/${encodeURIComponent(id)}`);
  }

  listIpam(): Promise<IpamList> {
    return this.request('GET', '/ipam');
  }
}

function normaliseError(status: number, body: unknown): ErrorResponse {
  const b = body as Partial<ErrorResponse> | undefined;
  if (b && typeof b.code === 'string' && typeof b.message === 'string') {
    return { code: b.code, message: b.message, cniCode: typeof b.cniCode === 'number' ? b.cniCode : 999, ...(b.details ? { details: b.details } : {}) };
  }
  // Framework-level errors (e.g. fastify's own 404 or validation errors) have another shape.
  const msg = (body as { message?: unknown } | undefined)?.message;
  return { code: status === 404 ? 'NOT_FOUND' : status < 500 ? 'INVALID_REQUEST' : 'INTERNAL', message: typeof msg === 'string' ? msg : `HTTP ${status}`, cniCode: status < 500 ? 7 : 999 };
}
