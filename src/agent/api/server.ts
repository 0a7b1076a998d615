import { chmod, rm, stat } from 'node:fs/promises';
import { connect } from 'node:net';
import Fastify, { type FastifyError, type FastifyInstance } from 'fastify';
import { AgentError } from '../../api/errors.js';
import type { CniRequest, Health, IpamList, IpamResponse } from '../../api/types.js';
import { ipFamily } from '../../cni/index.js';
import type { Endpoint } from '../../endpoint/endpoint.js';
import { identityToJSON, parseIdentityNumber, reservedIdentity, RESERVED_IDENTITIES } from '../../identity/index.js';
import type { Allocation } from '../../ipam/index.js';
import { LabelSet, LabelSource, parseLabel } from '../../labels/index.js';
import { formatPolicyName, formatTrace, parsePortProtocol, type PolicyFilter, type TracePeer } from '../../policy/index.js';
import type { Agent } from '../agent.js';
import { type EndpointAdoption, toAgentError } from '../cniService.js';
import { OpenApiSchemas } from './openapiSchemas.js';

const ENDPOINT_REF = /^(\d{1,5}|container-id:[A-Za-z0-9][A-Za-z0-9_.-]*|pod-name:[^:/\s]+:[^:/\s]+|ipv4:[0-9.]+|ipv6:[0-9a-fA-F:]+)$/;

function allocationBody(a: Allocation) {
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

function endpointRef(agent: Agent, ref: string): Endpoint {
  if (!ENDPOINT_REF.test(ref)) {
    throw new AgentError('INVALID_REQUEST', `invalid endpoint ID "${ref}": use <number>, container-id:<id>, pod-name:<namespace>:<name>, ipv4:<ip> or ipv6:<ip>`);
  }
  const ep = agent.endpoints.lookup(ref);
  if (!ep) throw new AgentError('NOT_FOUND', `endpoint ${ref} not found`);
  return ep;
}

/** The agent's REST API (api/openapi.yaml), validated against that document. */
export function buildServer(agent: Agent): FastifyInstance {
  const spec = new OpenApiSchemas();
  const app = Fastify({ logger: false, bodyLimit: 2 * 1024 * 1024 });

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

  app.get('/v1/healthz', async (): Promise<Health> => agent.health());

  app.get('/v1/config', async () => agent.publicConfig());
  app.patch('/v1/config', { schema: { body: spec.body('/config', 'patch') } }, async (req) => agent.patchConfig(req.body as Record<string, unknown>));

  app.get('/v1/ipam', async (): Promise<IpamList> => {
    const allocations: Allocation[] = [];
    for (const a of agent.ipam.all()) allocations.push(...(await a.list()));
    const stats = agent.ipam.all().map((a) => a.stats());
    return {
      mode: agent.ipam.mode,
      allocations: allocations.map(allocationBody),
      ...(stats[0] ? { stats: stats[0] as unknown as Record<string, number> } : {}),
    };
  });

  const allocateRoute = async (q: { family?: 'ipv4' | 'ipv6'; owner: string; pool?: string }, ip: string | undefined, expirationHeader: unknown): Promise<IpamResponse> => {
    const expiration = String(expirationHeader ?? '').toLowerCase() === 'true';
    const allocator = agent.ipam.all()[0];
    if (!allocator || agent.ipam.mode === 'delegated') throw new AgentError('INVALID_REQUEST', 'POST /ipam needs a kvstore-backed IPAM mode; delegated IPAM allocates through CNI ADD');
    if (ip !== undefined && ipFamily(ip) === 0) throw new AgentError('INVALID_REQUEST', `"${ip}" is not an IP address`);
    const a = await allocator.allocate({
      owner: q.owner,
      family: ip !== undefined ? (ipFamily(ip) as 4 | 6) : q.family === 'ipv6' ? 6 : 4,
      ...(ip !== undefined ? { ip } : {}),
      ...(q.pool ? { pool: q.pool } : {}),
      ...(expiration ? { expirationMs: agent.config.ipamExpirationMs } : {}),
    });
    const v4 = allocator.routerAddress(4)?.ip;
    const v6 = allocator.routerAddress(6)?.ip;
    return { address: allocationBody(a), hostAddressing: { ...(v4 ? { ipv4: v4 } : {}), ...(v6 ? { ipv6: v6 } : {}) } };
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
    for (const a of agent.ipam.all()) {
      if (await a.releaseIp(ip)) return { released: ip };
    }
    throw new AgentError('NOT_FOUND', `address ${ip} is not allocated`);
  });

  app.get('/v1/endpoint', async () => agent.endpoints.list());
  app.get('/v1/endpoint/:id', async (req) => endpointRef(agent, (req.params as { id: string }).id));
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
    const ep = await agent.cni.adoptEndpoint({ ...body, ...(id !== undefined ? { id } : {}) });
    reply.status(201);
    return ep;
  });
  app.delete('/v1/endpoint/:id', async (req) => {
    const ep = endpointRef(agent, (req.params as { id: string }).id);
    await agent.deleteEndpoint(ep);
    return { deleted: ep.id };
  });

  app.patch('/v1/endpoint/:id/labels', { schema: { body: spec.body('/endpoint/{id}/labels', 'patch') } }, async (req) => {
    const ep = endpointRef(agent, (req.params as { id: string }).id);
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
    return agent.updateLabels(ep, labels);
  });

  app.get('/v1/identity', async () => {
    const held = agent.identities.list().map((i) => ({ ...identityToJSON(i), references: agent.identities.references(i.id) }));
    return [...RESERVED_IDENTITIES.map(identityToJSON), ...held];
  });
  app.get('/v1/identity/:id', async (req) => {
    const text = (req.params as { id: string }).id;
    if (!/^\d{1,10}$/.test(text)) throw new AgentError('INVALID_REQUEST', `invalid identity "${text}": a number`);
    const id = parseIdentityNumber(Number(text));
    const identity = reservedIdentity(id) ?? agent.identities.lookupById(id);
    if (!identity) throw new AgentError('NOT_FOUND', `identity ${id} not found`);
    return { ...identityToJSON(identity), references: agent.identities.references(id) };
  });
  app.get('/v1/ip', async () => agent.ipcache.list());

  const policyFilter = (q: { name?: string; namespace?: string; label?: string | string[] }): PolicyFilter => ({
    ...(q.name ? { name: q.name } : {}),
    ...(q.namespace !== undefined ? { namespace: q.namespace } : {}),
    ...(q.label ? { labels: Array.isArray(q.label) ? q.label : [q.label] } : {}),
  });
  app.get('/v1/policy', { schema: { querystring: spec.query('/policy', 'get') } }, async (req) => {
    const policies = agent.policy.policies(policyFilter(req.query as Record<string, string>));
    return { revision: agent.policy.revision, policies: policies.map((p) => ({ name: formatPolicyName(p.name), document: p.document })) };
  });
  app.put('/v1/policy', { schema: { body: spec.body('/policy', 'put') } }, async (req) => {
    const r = agent.policy.importText((req.body as { text: string }).text);
    agent.applyRegenerations(r.regenerations);
    return { revision: r.revision, policies: r.policies.map(formatPolicyName), regenerated: r.regenerations.map((x) => x.endpointId) };
  });
  app.delete('/v1/policy', { schema: { querystring: spec.query('/policy', 'delete') } }, async (req) => {
    const q = req.query as { all?: boolean; name?: string; namespace?: string; label?: string | string[] };
    const filter = policyFilter(q);
    // An empty filter deletes everything: demand that be said out loud.
    if (Object.keys(filter).length === 0 && q.all !== true) throw new AgentError('INVALID_REQUEST', 'give name, namespace or label to select policies, or all=true to delete every policy');
    const r = agent.policy.deletePolicies(filter);
    agent.applyRegenerations(r.regenerations);
    return { revision: r.revision, deleted: r.deleted.map(formatPolicyName), regenerated: r.regenerations.map((x) => x.endpointId) };
  });
  app.get('/v1/policy/selectors', async () => agent.policy.selectors());
  app.post('/v1/policy/trace', { schema: { body: spec.body('/policy/trace', 'post') } }, async (req) => {
    const body = req.body as { src: string[]; dst: string[]; dport: string };
    const peer = (labels: string[]): TracePeer => ({ labels: LabelSet.from(labels.map((t) => parseLabel(t, LabelSource.K8s))) });
    const { port, proto } = parsePortProtocol(body.dport);
    const t = agent.policy.trace(peer(body.src), peer(body.dst), proto, port);
    return { verdict: t.verdict, egress: t.egress, ingress: t.ingress, text: formatTrace(t) };
  });
  app.get('/v1/endpoint/:id/policy', async (req) => {
    const ep = endpointRef(agent, (req.params as { id: string }).id);
    const p = agent.policy.endpointPolicy(ep.id);
    return {
      endpointId: p.endpointId,
      identity: p.identity,
      policyRevision: p.policyRevision,
      enforcement: p.enforcement,
      entries: p.entries,
      ...(p.error ? { error: p.error.message } : {}),
      // Computed here; the Linux datapath does not enforce policy maps yet.
      datapathEnforced: false,
    };
  });

  app.post('/v1/cni', { schema: { body: spec.body('/cni', 'post') } }, async (req) => agent.cni.handle(req.body as CniRequest));

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
