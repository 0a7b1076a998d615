/**
 * healthCheckNodePort: a LoadBalancer Service with externalTrafficPolicy
 * Local gets a node port of its own from the API server, and the cloud load
 * balancer asks every node there whether to send it traffic. As kube-proxy
 * and Cilium answer: 200 while the node has a ready endpoint of the Service,
 * 503 while it has none, with the count in a JSON body and in
 * X-Load-Balancing-Endpoint-Weight. Without this server every node looks
 * unhealthy to the load balancer and a Local Service takes no traffic.
 *
 * One HTTP server per port, on every address of the node (:: takes IPv4 too;
 * 0.0.0.0 where the node has no IPv6). The count is read at each request,
 * so it follows endpoints without being told. A port that cannot be bound
 * (another process holds it) is logged and tried again at the Service's
 * next change.
 */
import { createServer, type Server } from 'node:http';
import type { Logger } from '../logging/logger.js';

export interface HealthCheckNodePortsOptions {
  logger: Logger;
  /** The Service's ready endpoints on this node, read at each request. */
  localEndpoints: (key: string) => number;
  /** Where to listen (default every address: ::, or 0.0.0.0 without IPv6). Tests give 127.0.0.1. */
  host?: string;
}

interface Served {
  key: string;
  server: Server;
}

export class HealthCheckNodePorts {
  readonly #log: Logger;
  readonly #o: HealthCheckNodePortsOptions;
  /** Service key → the port it wants. */
  readonly #wanted = new Map<string, number>();
  /** Port → its server and the Service it answers for. */
  readonly #served = new Map<number, Served>();
  #stopped = false;

  constructor(o: HealthCheckNodePortsOptions) {
    this.#o = o;
    this.#log = o.logger.child({ component: 'health-check-node-port' });
  }

  /** The ports served now, by Service. */
  ports(): Map<string, number> {
    return new Map([...this.#served].map(([port, s]) => [s.key, port]));
  }

  /** Service `key` wants `port` served (undefined: none); a port it had before goes. */
  async set(key: string, port: number | undefined): Promise<void> {
    if (this.#stopped) return;
    const had = this.#wanted.get(key);
    if (port === undefined) this.#wanted.delete(key);
    else this.#wanted.set(key, port);
    if (had !== undefined && had !== port && this.#served.get(had)?.key === key) await this.#close(had);
    if (port === undefined || this.#served.get(port)?.key === key) return;
    const holder = this.#served.get(port);
    if (holder) {
      // The API server never gives two Services one port; a Service that had it and has not let go yet keeps it.
      this.#log.warn({ service: key, port, holder: holder.key }, 'healthCheckNodePort already served for another Service');
      return;
    }
    await this.#open(key, port);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await Promise.all([...this.#served.keys()].map((p) => this.#close(p)));
  }

  async #open(key: string, port: number): Promise<void> {
    const slash = key.indexOf('/');
    const service = { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
    const server = createServer((req, res) => {
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res.writeHead(405, { Allow: 'GET, HEAD' }).end();
        return;
      }
      const count = this.#o.localEndpoints(key);
      const body = JSON.stringify({ service, localEndpoints: count, serviceProxyHealthy: true });
      res.writeHead(count > 0 ? 200 : 503, {
        'Content-Type': 'application/json',
        'X-Content-Type-Options': 'nosniff',
        'X-Load-Balancing-Endpoint-Weight': String(count),
        'Content-Length': Buffer.byteLength(body),
      });
      res.end(req.method === 'HEAD' ? undefined : body);
    });
    // A load balancer's probe is one short request: no connection is kept waiting for long.
    server.keepAliveTimeout = 5_000;
    server.headersTimeout = 10_000;
    server.requestTimeout = 10_000;
    try {
      await listen(server, port, this.#o.host);
    } catch (err) {
      this.#log.error({ service: key, port, err }, 'healthCheckNodePort cannot be served; tried again at the Service\'s next change');
      return;
    }
    // Let go meanwhile (or stopped): not served after all.
    if (this.#stopped || this.#wanted.get(key) !== port) {
      server.close();
      return;
    }
    this.#served.set(port, { key, server });
    this.#log.info({ service: key, port }, 'healthCheckNodePort served');
  }

  async #close(port: number): Promise<void> {
    const s = this.#served.get(port);
    if (!s) return;
    this.#served.delete(port);
    s.server.closeAllConnections();
    await new Promise<void>((resolve) => s.server.close(() => resolve()));
    this.#log.info({ service: s.key, port }, 'healthCheckNodePort no longer served');
  }
}

/** Listens on `host`, or on every address: :: (IPv4 too), else 0.0.0.0 when the node has no IPv6. */
async function listen(server: Server, port: number, host: string | undefined): Promise<void> {
  const once = (h: string, ipv6Only?: boolean) =>
    new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => {
        server.off('listening', onListening);
        reject(err);
      };
      const onListening = () => {
        server.off('error', onError);
        resolve();
      };
      server.once('error', onError);
      server.once('listening', onListening);
      server.listen({ port, host: h, ...(ipv6Only !== undefined ? { ipv6Only } : {}) });
    });
  if (host !== undefined) return once(host);
  try {
    await once('::', false);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EAFNOSUPPORT' && (err as NodeJS.ErrnoException).code !== 'EADDRNOTAVAIL') throw err;
    await once('0.0.0.0');
  }
}
