/**
 * The agent's flows on TCP (--flows-listen-addr): GET /v1/flows (the same
 * route and filters as the socket's), GET /v1/policy (read-only, so a UI
 * can show a rule's policy) and GET /healthz — nothing that writes, no CNI,
 * no kvstore. A relay (`tendril relay`) or `tendril observe --server`
 * reads it. Access: TLS and/or a bearer token (listenAccess.ts). Other
 * read-only routes (a web UI) can be mounted with `extraRoutes`.
 */
import type { FastifyInstance } from 'fastify';
import type { Logger } from '../../logging/logger.js';
import type { ServeAddress } from '../../metrics/metricsServer.js';
import { type FlowsApi, registerFlowsRoute } from './flowsRoute.js';
import { type ListenAccess, listenAt, listenServerFactory, requireBearerToken } from './listenAccess.js';
import type { OpenApiSchemas } from './openapiSchemas.js';
import { createApiApp, type HealthApi, type PolicyReadApi, registerHealthzRoute, registerPolicyReadRoute } from './server.js';

export interface FlowsListenerOptions {
  flows: FlowsApi | undefined;
  policy: PolicyReadApi;
  health: Pick<HealthApi, 'health'>;
  log: Logger;
  access: ListenAccess;
  /** More read-only routes on the same instance (a web UI), registered after the API's. */
  extraRoutes?: (app: FastifyInstance) => void;
  /** Paths of the extra routes anyone may GET without the token (a web UI's page and assets, which hold no data). */
  publicPaths?: (path: string) => boolean;
  validateResponses?: boolean;
  spec?: OpenApiSchemas;
}

/** The listener's fastify instance, not listening yet. */
export function buildFlowsListener(o: FlowsListenerOptions): FastifyInstance {
  const app = createApiApp({
    log: o.log,
    serverFactory: listenServerFactory(o.access),
    ...(o.validateResponses !== undefined ? { validateResponses: o.validateResponses } : {}),
    ...(o.spec ? { spec: o.spec } : {}),
  });
  if (o.access.token !== undefined) requireBearerToken(app, o.access.token, o.publicPaths);
  registerHealthzRoute(app, o.health);
  registerFlowsRoute(app, o.flows, o.log);
  registerPolicyReadRoute(app, o.policy);
  o.extraRoutes?.(app);
  return app;
}

/** A flows listener serving on its address. */
export class FlowsListener {
  private constructor(
    private readonly app: FastifyInstance,
    /** As bound: the port chosen for :0. */
    readonly address: ServeAddress,
    readonly tls: boolean,
  ) {}

  static async start(where: ServeAddress, o: FlowsListenerOptions, flag = '--flows-listen-addr'): Promise<FlowsListener> {
    const app = buildFlowsListener(o);
    try {
      const bound = await listenAt(app, where, flag);
      return new FlowsListener(app, bound, o.access.tls !== undefined);
    } catch (err) {
      await app.close();
      throw err;
    }
  }

  /** Stops listening; followers' streams are ended (the flows route's preClose). */
  async close(): Promise<void> {
    await this.app.close();
  }
}
