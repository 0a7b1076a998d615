/**
 * `--prometheus-serve-addr`: the metrics on a TCP address for a Prometheus
 * server to scrape, beside the API socket (which only root can reach). Only
 * `GET /metrics` and `GET /healthz` are served: a kubelet's HTTP probe needs
 * a route it can reach, and nothing else of the agent is reachable here.
 * tendril-operator serves its /metrics and /healthz with it too (--health-addr).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import { CodedError } from '../errors/codedError.js';
import type { Logger } from '../logging/logger.js';

/** What the server renders at GET /metrics: the agent's AgentMetrics, or another program's registry (the operator's). */
export interface MetricsSource {
  render(): Promise<string>;
  readonly contentType: string;
}

export type MetricsServeErrorCode = 'INVALID_ADDRESS' | 'LISTEN_FAILED';

export class MetricsServeError extends CodedError<MetricsServeErrorCode> {}

/**
 * What GET /healthz answers here: the agent's status, or why it is not
 * ready (as GET /v1/healthz on the socket: Kubernetes not synced yet).
 */
export type HealthSource = () => Promise<{ status: string } | { notReady: string }>;

export interface ServeAddress {
  /** An IP address, a host name, or '' for every address. */
  host: string;
  port: number;
}

/**
 * `host:port`, `[v6]:port` or `:port` (every address). Port 0 takes a free
 * port (tests). Throws MetricsServeError INVALID_ADDRESS saying what is wrong.
 */
export function parseServeAddress(addr: string, flag = '--prometheus-serve-addr'): ServeAddress {
  const bad = (why: string) => new MetricsServeError('INVALID_ADDRESS', `invalid ${flag} "${addr}": ${why}`);
  const m = /^(?:\[([^\]]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(addr);
  if (!m) throw bad('use host:port, [ipv6]:port or :port, such as 127.0.0.1:9962');
  const host = m[1] ?? m[2] ?? '';
  if (m[1] !== undefined && isIP(m[1]) !== 6) throw bad(`${m[1]} in brackets is not an IPv6 address`);
  if (host !== '' && isIP(host) === 0 && !/^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$/.test(host)) throw bad(`${host} is neither an IP address nor a host name`);
  const port = Number(m[3]);
  if (port > 65535) throw bad(`port ${port} is above 65535`);
  return { host, port };
}

export class MetricsServer {
  private constructor(
    private readonly server: Server,
    /** Where it listens, as bound (the port chosen when 0 was asked). */
    readonly address: ServeAddress,
  ) {}

  /** Listens on `addr`; an address that cannot be bound is a MetricsServeError LISTEN_FAILED naming it. */
  static async start(addr: string, metrics: MetricsSource, log: Logger, health?: HealthSource): Promise<MetricsServer> {
    const where = parseServeAddress(addr);
    const server = createServer((req, res) => void serve(req, res, metrics, log, health));
    await new Promise<void>((resolve, reject) => {
      const onError = (err: NodeJS.ErrnoException) => {
        reject(new MetricsServeError('LISTEN_FAILED', `cannot serve metrics on ${addr}: ${err.code ?? err.message}`, { cause: err }));
      };
      server.once('error', onError);
      server.listen({ port: where.port, ...(where.host !== '' ? { host: where.host } : {}) }, () => {
        server.off('error', onError);
        resolve();
      });
    });
    const bound = server.address();
    const port = bound !== null && typeof bound === 'object' ? bound.port : where.port;
    return new MetricsServer(server, { host: where.host, port });
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      // A scraper's keep-alive connection must not hold the agent's stop.
      this.server.closeAllConnections();
    });
  }
}

const ONLY = 'only GET /metrics and GET /healthz are served here\n';

async function serve(req: IncomingMessage, res: ServerResponse, metrics: MetricsSource, log: Logger, health: HealthSource | undefined): Promise<void> {
  const path = (req.url ?? '').split('?')[0];
  if (path !== '/metrics' && !(path === '/healthz' && health)) {
    res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end(ONLY);
    return;
  }
  if (req.method !== 'GET') {
    res.writeHead(405, { allow: 'GET', 'content-type': 'text/plain; charset=utf-8' }).end(ONLY);
    return;
  }
  if (path === '/healthz') return serveHealth(res, health!, log);
  try {
    const text = await metrics.render();
    res.writeHead(200, { 'content-type': metrics.contentType }).end(text);
  } catch (err) {
    log.error({ err }, 'collecting metrics failed');
    res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('collecting metrics failed\n');
  }
}

/** 200 {status} when the agent is ready, 503 {code: NOT_READY, message} when not (the socket's GET /healthz bodies, less the details). */
async function serveHealth(res: ServerResponse, health: HealthSource, log: Logger): Promise<void> {
  const json = { 'content-type': 'application/json; charset=utf-8' };
  try {
    const h = await health();
    if ('notReady' in h) res.writeHead(503, json).end(JSON.stringify({ code: 'NOT_READY', message: h.notReady }));
    else res.writeHead(200, json).end(JSON.stringify({ status: h.status }));
  } catch (err) {
    log.error({ err }, 'health check failed');
    res.writeHead(500, json).end(JSON.stringify({ code: 'INTERNAL', message: 'health check failed' }));
  }
}

/** Whether parseServeAddress takes `addr` (the configuration's check). */
export function isServeAddress(addr: string): boolean {
  try {
    parseServeAddress(addr);
    return true;
  } catch {
    return false;
  }
}
