import { chmod, rm, stat } from 'node:fs/promises';
import { connect } from 'node:net';
import Fastify, { type FastifyError, type FastifyInstance } from 'fastify';
import { AgentError } from '../../api/errors.js';
import type { Health, IpamAllocationBody, IpamList, IpamResponse } from '../../api/types.js';
import { ipFamily } from '../../cni/index.js';
import { ENDPOINT_REF, type EndpointStatus } from '../../endpoint/index.js';
import { parseIdentityNumber } from '../../identity/index.js';
import type { IpcacheEntry } from '../../ipcache/index.js';
import type { Allocation } from '../../ipam/index.js';
import { LabelSet, LabelSource, parseLabel } from '../../labels/index.js';
import type { Logger } from '../../logging/logger.js';
import {
  type EndpointPolicy,
  formatPolicyName,
  formatTrace,
  parsePortProtocol,
  type Policy,
  type PolicyFilter,
  type PolicyName,
  type SelectorCache,
  type TracePeer,
  type TraceResult,
} from '../../policy/index.js';
import { type EndpointAdoption, toAgentError } from '../cniService.js';
import { type CniHandler, cniRoute } from './cniRoute.js';
import { OpenApiSchemas } from './openapiSchemas.js';

// The server depends on these narrow interfaces only; the Agent composes them
// from its subsystems, and a test can serve any of them on its own.

/** /endpoint: local endpoints and their lifecycle. */
export interface EndpointApi {
  list(): EndpointStatus[];
  /** Resolves a reference the route has validated against ENDPOINT_REF. */
  lookup(ref: string): EndpointStatus | undefined;
  adopt(req: EndpointAdoption): Promise<EndpointStatus>;
  delete(id: number): Promise<void>;
  updateLabels(id: number, labels: LabelSet): Promise<EndpointStatus>;
}

/** /ipam: the node's allocations and the granular allocate/release Cilium's plugin uses. */
export interface IpamApi {
  readonly mode: string;
  list(): Promise<Allocation[]>;
  stats(): Record<string, number> | undefined;
  /** `provisional`: the allocation expires unless an endpoint confirms it. */
  allocate(req: { owner: string; family: 4 | 6; ip?: string; pool?: string; provisional: boolean }): Promise<{ allocation: Allocation; hostAddressing: { ipv4?: string; ipv6?: string } }>;
  /** Frees an address: CONFLICT while a live endpoint holds it, NOT_FOUND when nothing does. */
  release(ip: string): Promise<void>;
}

/** /policy: import, delete, explain; revisions are the ones endpoints realize. */
export interface PolicyApi {
  readonly revision: number;
  list(filter: PolicyFilter): Policy[];
  import(text: string): { revision: number; policies: readonly PolicyName[]; endpoints: readonly number[] };
  delete(filter: PolicyFilter): { revision: number; deleted: readonly PolicyName[]; endpoints: readonly number[] };
  selectors(): ReturnType<SelectorCache['list']>;
  trace(src: TracePeer, dst: TracePeer, proto: number, port: number): TraceResult;
  endpointPolicy(id: number): EndpointPolicy;
}

export interface IdentityView {
  id: number;
  labels: string[];
  scope: string;
  references?: number;
}

/** /identity: reserved identities and those this node holds. */
export interface IdentityApi {
  list(): IdentityView[];
  get(id: number): IdentityView | undefined;
}

export interface IpcacheApi {
  list(): IpcacheEntry[];
}

/** /healthz and /config. */
export interface HealthApi {
  health(): Promise<Health>;
  config(): Record<string, unknown>;
  patchConfig(patch: Record<string, unknown>): Record<string, unknown>;
}

/** Everything the API serves. */
export interface AgentApi {
  endpoints: EndpointApi;
  ipam: IpamApi;
  policy: PolicyApi;
  identities: IdentityApi;
  ipcache: IpcacheApi;
  health: HealthApi;
  cni: CniHandler;
  log: Logger;
}

export function allocationBody(a: Allocation): IpamAllocationBody {
  return {
    owner: a.owner,
    family: a.family,
    ip: a.ip,
    prefixLength: a.prefixLength,
    ...(a.gateway ? { gateway: a.gateway } : {}),
    pool: a.pool,
    cidr: a.cidr,
    seq: a.seq,
    ...(a.expiresAt !== undefined ? { expiresAt: a.expiresAt } : {}),
  };
}

function endpointRef(endpoints: EndpointApi, ref: string): EndpointStatus {
  if (!ENDPOINT_REF.test(ref)) {
    throw new AgentError('INVALID_REQUEST', `invalid endpoint ID "${ref}": use <number>, container-id:<id>, pod-name:<namespace>:<name>, ipv4:<ip> or ipv6:<ip>`);
  }
  const ep = endpoints.lookup(ref);
  if (!ep) throw new AgentError('NOT_FOUND', `endpoint ${ref} not found`);
  return ep;
}

/** The agent's REST API (api/openapi.yaml), validated against that document. */
export function buildServer(agent: AgentApi): FastifyInstance {
  const spec = new OpenApiSchemas();
  const app = Fastify({ logger: false, bodyLimit: 2 * 1024 * 1024 });
  const { endpoints, ipam, policy, identities, ipcache, health } = agent;

  app.setErrorHandler((err: FastifyError, _req, reply) => {
    if (err.validation) {
      const e = new AgentError('INVALID_REQUEST', `invalid request: ${err.message}`);
      return reply.status(e.httpStatus).send(e.toResponse());
    }
    if (err.statusCode && err.statusCode < 500 && !(err instanceof AgentError)) {
      const e = new AgentError('INVALID_REQUEST', err.message);
      return reply.status(err.statusCode).send(e.toResponse());
    }
    const e = toAgentError(err);
    if (e.httpStatus >= 500) agent.log.error({ err, code: e.code }, 'API request failed');
    return reply.status(e.httpStatus).send(e.toResponse());
  });
  app.setNotFoundHandler((req, reply) => {
    const e = new AgentError('NOT_FOUND', `no route ${req.method} ${req.url}`);
    return reply.status(404).send(e.toResponse());
  });

  app.get('/v1/healthz', async (): Promise<Health> => health.health());

  app.get('/v1/config', async () => health.config());
  app.patch('/v1/config', { schema: { body: spec.body('/config', 'patch') } }, async (req) => health.patchConfig(req.body as Record<string, unknown>));

  app.get('/v1/ipam', async (): Promise<IpamList> => {
    const stats = ipam.stats();
    return { mode: ipam.mode, allocations: (await ipam.list()).map(allocationBody), ...(stats ? { stats } : {}) };
  });

  const allocateRoute = async (q: { family?: 'ipv4' | 'ipv6'; owner: string; pool?: string }, ip: string | undefined, expirationHeader: unknown): Promise<IpamResponse> => {
    if (ip !== undefined && ipFamily(ip) === 0) throw new AgentError('INVALID_REQUEST', `"${ip}" is not an IP address`);
    const r = await ipam.allocate({
      owner: q.owner,
      family: ip !== undefined ? (ipFamily(ip) as 4 | 6) : q.family === 'ipv6' ? 6 : 4,
      ...(ip !== undefined ? { ip } : {}),
      ...(q.pool ? { pool: q.pool } : {}),
      provisional: String(expirationHeader ?? '').toLowerCase() === 'true',
    });
    return { address: allocationBody(r.allocation), hostAddressing: r.hostAddressing };
  };
  app.post('/v1/ipam', { schema: { querystring: spec.query('/ipam', 'post') } }, async (req, reply): Promise<IpamResponse> => {
    const r = await allocateRoute(req.query as { family?: 'ipv4' | 'ipv6'; owner: string; pool?: string }, undefined, req.headers.expiration);
    reply.status(201);
    return r;
  });
  app.post('/v1/ipam/:ip', { schema: { querystring: spec.query('/ipam/{ip}', 'post') } }, async (req, reply): Promise<IpamResponse> => {
    const r = await allocateRoute(req.query as { owner: string; pool?: string }, (req.params as { ip: string }).ip, req.headers.expiration);
    reply.status(201);
    return r;
  });

  app.delete('/v1/ipam/:ip', async (req) => {
    const { ip } = req.params as { ip: string };
    if (ipFamily(ip) === 0) throw new AgentError('INVALID_REQUEST', `"${ip}" is not an IP address`);
    await ipam.release(ip);
    return { released: ip };
  });

  app.get('/v1/endpoint', async () => endpoints.list());
  app.get('/v1/endpoint/:id', async (req) => endpointRef(endpoints, (req.params as { id: string }).id));
  app.put('/v1/endpoint/:id', { schema: { body: spec.body('/endpoint/{id}', 'put') } }, async (req, reply) => {
    const ref = (req.params as { id: string }).id;
    const body = req.body as Omit<EndpointAdoption, 'id'>;
    let id: number | undefined;
    if (/^\d{1,5}$/.test(ref)) {
      id = Number(ref);
      if (id < 1 || id > 0xffff) throw new AgentError('INVALID_REQUEST', `endpoint ID ${ref} is out of range 1-65535`);
    } else if (ref !== `container-id:${body.containerId}`) {
      throw new AgentError('INVALID_REQUEST', 'PUT /endpoint/{id} takes a number or container-id:<the body\'s containerId>');
    }
    const ep = await endpoints.adopt({ ...body, ...(id !== undefined ? { id } : {}) });
    reply.status(201);
    return ep;
  });
  app.delete('/v1/endpoint/:id', async (req) => {
    const ep = endpointRef(endpoints, (req.params as { id: string }).id);
    await endpoints.delete(ep.id);
    return { deleted: ep.id };
  });

  app.patch('/v1/endpoint/:id/labels', { schema: { body: spec.body('/endpoint/{id}/labels', 'patch') } }, async (req) => {
    const ep = endpointRef(endpoints, (req.params as { id: string }).id);
    const body = req.body as { add?: string[]; delete?: string[] };
    // Without a source, a label takes the endpoint's kind: k8s for pods, container otherwise.
    const source = ep.podNamespace ? LabelSource.K8s : LabelSource.Container;
    let labels = LabelSet.parse(ep.labels);
    for (const text of body.delete ?? []) {
      // A key without a source deletes it from every source.
      const l = parseLabel(text, LabelSource.Any);
      labels = labels.without(l.key, l.source);
    }
    labels = labels.with((body.add ?? []).map((t) => parseLabel(t, source)));
    return endpoints.updateLabels(ep.id, labels);
  });

  app.get('/v1/identity', async () => identities.list());
  app.get('/v1/identity/:id', async (req) => {
    const text = (req.params as { id: string }).id;
    if (!/^\d{1,10}$/.test(text)) throw new AgentError('INVALID_REQUEST', `invalid identity "${text}": a number`);
    const identity = identities.get(parseIdentityNumber(Number(text)));
    if (!identity) throw new AgentError('NOT_FOUND', `identity ${text} not found`);
    return identity;
  });
  app.get('/v1/ip', async () => ipcache.list());

  const policyFilter = (q: { name?: string; namespace?: string; label?: string | string[] }): PolicyFilter => ({
    ...(q.name ? { name: q.name } : {}),
    ...(q.namespace !== undefined ? { namespace: q.namespace } : {}),
    ...(q.label ? { labels: Array.isArray(q.label) ? q.label : [q.label] } : {}),
  });
  app.get('/v1/policy', { schema: { querystring: spec.query('/policy', 'get') } }, async (req) => {
    const policies = policy.list(policyFilter(req.query as Record<string, string>));
    return { revision: policy.revision, policies: policies.map((p) => ({ name: formatPolicyName(p.name), document: p.document })) };
  });
  app.put('/v1/policy', { schema: { body: spec.body('/policy', 'put') } }, async (req) => {
    const r = policy.import((req.body as { text: string }).text);
    return { revision: r.revision, policies: r.policies.map(formatPolicyName), regenerated: r.endpoints };
  });
  app.delete('/v1/policy', { schema: { querystring: spec.query('/policy', 'delete') } }, async (req) => {
    const q = req.query as { all?: boolean; name?: string; namespace?: string; label?: string | string[] };
    const filter = policyFilter(q);
    // An empty filter deletes everything: demand that be said out loud.
    if (Object.keys(filter).length === 0 && q.all !== true) throw new AgentError('INVALID_REQUEST', 'give name, namespace or label to select policies, or all=true to delete every policy');
    const r = policy.delete(filter);
    return { revision: r.revision, deleted: r.deleted.map(formatPolicyName), regenerated: r.endpoints };
  });
  app.get('/v1/policy/selectors', async () => policy.selectors());
  app.post('/v1/policy/trace', { schema: { body: spec.body('/policy/trace', 'post') } }, async (req) => {
    const body = req.body as { src: string[]; dst: string[]; dport: string };
    const peer = (labels: string[]): TracePeer => ({ labels: LabelSet.from(labels.map((t) => parseLabel(t, LabelSource.K8s))) });
    const { port, proto } = parsePortProtocol(body.dport);
    const t = policy.trace(peer(body.src), peer(body.dst), proto, port);
    return { verdict: t.verdict, egress: t.egress, ingress: t.ingress, text: formatTrace(t) };
  });
  app.get('/v1/endpoint/:id/policy', async (req) => {
    const ep = endpointRef(endpoints, (req.params as { id: string }).id);
    const p = policy.endpointPolicy(ep.id);
    return {
      endpointId: p.endpointId,
      identity: p.identity,
      // The revision this map state was computed at, and the one the endpoint's datapath realizes.
      policyRevision: policy.revision,
      realizedPolicyRevision: ep.policyRevision,
      enforcement: p.enforcement,
      entries: p.entries,
      ...(p.error ? { error: p.error.message } : {}),
      // Computed here; the Linux datapath does not enforce policy maps yet.
      datapathEnforced: false,
    };
  });

  app.post('/v1/cni', { schema: { body: spec.body('/cni', 'post') } }, cniRoute(agent.cni, agent.log));

  return app;
}

/** A socket file nobody listens on is left over from a crash: remove it; refuse if an agent answers. */
async function clearStaleSocket(path: string): Promise<void> {
  const exists = await stat(path).then(
    () => true,
    (err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return false;
      throw err;
    },
  );
  if (!exists) return;
  const live = await new Promise<boolean>((resolve) => {
    const s = connect(path);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
  if (live) throw new AgentError('CONFLICT', `another agent is already serving ${path}`);
  await rm(path, { force: true });
}

/** Listens on the unix socket with mode 0600: the API changes the host's network and is root-only. */
export async function listenOnSocket(app: FastifyInstance, path: string): Promise<void> {
  await clearStaleSocket(path);
  const oldMask = process.umask(0o177);
  try {
    await app.listen({ path });
  } finally {
    process.umask(oldMask);
  }
  await chmod(path, 0o600);
}
