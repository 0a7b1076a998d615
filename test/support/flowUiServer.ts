/**
 * The flow UI on a fastify app of the caller's (the UI bench serves
 * generated flows beside it). On 127.0.0.1, a free port.
 */
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
