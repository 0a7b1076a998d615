/**
 * /v1/service: Cilium's service API (one frontend, its backends and flags
 * under a stable ID) over the service subsystem. The document validates the
 * body's shape; the subsystem decides whether it is a service tendril can
 * serve, and its errors keep their codes on the wire (SERVICE_INVALID 400,
 * SERVICE_NOT_FOUND 404, SERVICE_CONFLICT and SERVICE_UNSUPPORTED 409,
 * SERVICE_DATAPATH_FAILED 503); a batch (PATCH /v1/service) answers each
 * change's outcome, its failures with the same codes. Without the eBPF datapath (no subsystem, or
 * one that is not `supported`) every route answers 409 SERVICE_UNSUPPORTED.
 */
import type { FastifyInstance } from 'fastify';
import { AgentError, agentErrorFromService } from '../errors.js';
import type { PathParams, RequestBody, ResponseBody } from '../types.js';
import { MAX_SERVICE_ID } from '../../datapath/limits.js';
import { isServiceError, ServiceErrorCode } from '../../service/errors.js';
import type { ServiceApi, ServiceChange, ServiceSpec, ServiceStatus } from '../../service/types.js';
import { describeErrors } from './validatorCompiler.js';

export const SERVICES_UNSUPPORTED = 'services need the eBPF datapath: this node runs the routing datapath, which does not load-balance';

/** The service subsystem; one that says it is not `supported` (no load balancer in the datapath) is treated as absent, reads included. */
export type ServiceRoutesApi = ServiceApi & { readonly supported?: boolean };

function need(services: ServiceRoutesApi | undefined): ServiceApi {
  if (!services || services.supported === false) throw new AgentError(ServiceErrorCode.UNSUPPORTED, SERVICES_UNSUPPORTED);
  return services;
}

/** The path's service ID: a number 1-65535, as the datapath's reverse NAT index is. */
export function serviceIdParam(text: string): number {
  if (!/^\d{1,5}$/.test(text) || Number(text) < 1 || Number(text) > MAX_SERVICE_ID) {
    throw new AgentError(ServiceErrorCode.INVALID, `invalid service ID "${text}": a service ID is a number from 1 to ${MAX_SERVICE_ID}`);
  }
  return Number(text);
}

/** Runs a service operation, its ServiceErrors answered with their own codes. */
async function serve<T>(fn: () => Promise<T> | T): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (isServiceError(err)) throw agentErrorFromService(err);
    throw err;
  }
}

/** A status as the document writes it (the types are the same shape; this keeps the route honest if they drift). */
function statusBody(s: ServiceStatus): ResponseBody<'getService', 200> {
  return {
    id: s.id,
    'frontend-address': { ip: s['frontend-address'].ip, port: s['frontend-address'].port, protocol: s['frontend-address'].protocol },
    'backend-addresses': s['backend-addresses'].map((b) => ({ ip: b.ip, port: b.port, weight: b.weight, state: b.state, id: b.id, local: b.local })),
    flags: { ...s.flags },
    realized: s.realized,
  };
}

export function registerServiceRoutes(app: FastifyInstance, services: ServiceRoutesApi | undefined): void {
  app.get('/v1/service', async (): Promise<ResponseBody<'listServices', 200>> => {
    const svc = need(services);
    return serve(() => svc.list().map(statusBody));
  });

  app.get('/v1/service/:id', async (req): Promise<ResponseBody<'getService', 200>> => {
    const svc = need(services);
    const id = serviceIdParam((req.params as PathParams<'getService'>).id);
    const s = await serve(() => svc.get(id));
    if (!s) throw new AgentError(ServiceErrorCode.NOT_FOUND, `service ${id} not found`);
    return statusBody(s);
  });

  // A bad body is told every field at fault by its path, the unknown field's name and the allowed values included.
  const schemaErrorFormatter = (errors: NonNullable<Parameters<typeof describeErrors>[0]>, dataVar: string) =>
    new Error(describeErrors(errors.map((e) => ({ ...e, instancePath: `${dataVar}${e.instancePath}` }))));
  app.put('/v1/service/:id', { schemaErrorFormatter }, async (req, reply): Promise<ResponseBody<'putService', 200 | 201>> => {
    const svc = need(services);
    const id = serviceIdParam((req.params as PathParams<'putService'>).id);
    const body = req.body as RequestBody<'putService'>;
    // Checked here too, so the answer does not depend on how far the subsystem reads.
    if (body.id !== undefined && body.id !== id) throw new AgentError(ServiceErrorCode.INVALID, `id: the body's ID ${body.id} is not the path's ${id}`);
    const r = await serve(() => svc.upsert(id, body as ServiceSpec));
    reply.status(r.created ? 201 : 200);
    return statusBody(r.service);
  });

  app.patch('/v1/service', { schemaErrorFormatter }, async (req): Promise<ResponseBody<'applyServices', 200>> => {
    const svc = need(services);
    const body = req.body as RequestBody<'applyServices'>;
    const changes: ServiceChange[] = body.changes.map((c) => ('upsert' in c ? { upsert: c.upsert as ServiceSpec & { id: number } } : { delete: c.delete }));
    const results = await serve(() => svc.apply(changes));
    return {
      failed: results.filter((r) => r.result === 'failed').length,
      results: results.map((r) => ({ id: r.id, op: r.op, result: r.result, ...(r.error ? { error: { ...r.error } } : {}) })),
    };
  });

  app.delete('/v1/service/:id', async (req): Promise<ResponseBody<'deleteService', 200>> => {
    const svc = need(services);
    const id = serviceIdParam((req.params as PathParams<'deleteService'>).id);
    await serve(() => svc.delete(id));
    return { deleted: id };
  });
}
