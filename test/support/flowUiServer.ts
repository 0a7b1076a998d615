/**
 * The flow UI as the relay or the agent's TCP listener will serve it: a
 * fastify app with registerFlowUi, and GET /v1/flows and GET /v1/policy
 * proxied to an agent's unix socket (streamed, so `follow` follows). On
 * 127.0.0.1, a free port.
 */
import { request } from 'node:http';
import Fastify, { type FastifyInstance } from 'fastify';
import { registerFlowUi } from '../../src/flowui/index.js';

export interface FlowUiServer {
  url: string;
  app: FastifyInstance;
  close(): Promise<void>;
}

/** Serves the UI, with `routes` adding what answers /v1/flows and /v1/policy. */
export async function startFlowUiServer(routes: (app: FastifyInstance) => void): Promise<FlowUiServer> {
  const app = Fastify({ logger: false, forceCloseConnections: true });
  registerFlowUi(app);
  routes(app);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const addr = app.server.address();
  if (addr === null || typeof addr === 'string') throw new Error('the flow UI server has no TCP address');
  return { url: `http://127.0.0.1:${addr.port}/`, app, close: () => app.close() };
}

/** The UI with its two API routes proxied to the agent listening on `socket`. */
export function startFlowUiProxy(socket: string): Promise<FlowUiServer> {
  return startFlowUiServer((app) => {
    for (const path of ['/v1/flows', '/v1/policy']) {
      app.get(path, (req, reply) => {
        const upstream = request({ socketPath: socket, path: req.url, method: 'GET', headers: { accept: req.headers.accept ?? '*/*' } }, (res) => {
          reply.code(res.statusCode ?? 502);
          const type = res.headers['content-type'];
          if (type !== undefined) reply.header('content-type', type);
          void reply.send(res);
        });
        upstream.on('error', (err) => {
          if (!reply.sent) void reply.code(502).send({ message: `agent: ${err.message}` });
        });
        // The browser left (a new filter, the page closed): the agent's stream ends with it.
        reply.raw.on('close', () => upstream.destroy());
        upstream.end();
      });
    }
  });
}
