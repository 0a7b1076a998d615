import { chmod, lstat, rm } from 'node:fs/promises';
import type { IncomingMessage, Server as HttpServer, ServerResponse } from 'node:http';
import { connect } from 'node:net';
import Fastify, { type FastifyError, type FastifyInstance, type RouteOptions } from 'fastify';
import { AgentError } from '../errors.js';
import {
  type AgentConfigView,
  type ApiIdentity,
  type ConfigPatch,
  type EndpointAdoption,
  type EndpointAdoptionBody,
  type Health,
  type K8sStatus,
  type LabelsPatch,
  type PathParams,
  type PolicyImport,
  type PolicyPromote,
  type PolicyTrace,
  type QueryParams,
  type ResponseBody,
  VALIDATE_RESPONSES_ENV,
} from '../types.js';
import { ipFamily } from '../../cni/index.js';
import { ENDPOINT_REF, type EndpointNotReady, type EndpointStatus, patchedLabels } from '../../endpoint/index.js';
import { parseIdentityNumber } from '../../identity/index.js';
import type { IpcacheEntry } from '../../ipcache/index.js';
import type { Allocation } from '../../ipam/index.js';
import { LabelSet } from '../../labels/index.js';
import type { Logger } from '../../logging/logger.js';
import {
  type EndpointPolicy,
  formatPolicyName,
  parsePortProtocol,
  type Policy,
  type PolicyFilter,
  type PolicyName,
  type SelectorCache,
  type TracePeer,
  type TraceResult,
} from '../../policy/index.js';
import { toAgentError } from '../errorMapping.js';
import { OwnershipError } from '../../errors/ownershipError.js';
import { type BpfApi, registerBpfRoutes } from './bpfRoutes.js';
import { type CniHandler, cniRoute } from './cniRoute.js';
import { findDuplicateKey } from '../../json/duplicateKeys.js';
import { type MonitorApi, registerMonitorRoute } from './monitorRoute.js';
import { type FlowsApi, registerFlowsRoute } from './flowsRoute.js';
import { registerServiceRoutes } from './serviceRoutes.js';
import { type NodeApi, registerNodeRoutes } from './nodeRoutes.js';
import { type KvstoreReadApi, registerKvstoreRoutes } from './kvstoreRoutes.js';
import type { ServiceApi } from '../../service/types.js';
import { OpenApiSchemas, type ServedRoute } from './openapiSchemas.js';
import { allocationBody, endpointBody, endpointPolicyBody, ipcacheEntryBody, traceBody } from './responseBodies.js';
import { RESPONSE_MISMATCH, ResponseValidator } from './responseValidator.js';
import { requestValidatorCompiler } from './validatorCompiler.js';
import { resolveTracePeers } from './tracePeers.js';

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

/** GET /policy: what the read-only listeners need of the policies. */
export interface PolicyReadApi {
  readonly revision: number;
  /** The kvstore revision of the last policy change this node applied (equal on every node once synced); 0 when unknown. */
  readonly clusterRevision?: number;
  list(filter: PolicyFilter): Policy[];
  /** Policies the kvstore lost that stay in force from the state dir until re-imported or confirmed lost. */
  lost?(): PolicyName[];
}

/** /policy: import, delete, explain; revisions are the ones endpoints realize. */
export interface PolicyApi extends PolicyReadApi {
  /** Drops the lost policies: the operator confirms the kvstore is right. */
  confirmLoss?(): Promise<{ revision: number; dropped: readonly PolicyName[]; endpoints: readonly number[] }>;
  /** Resolves once the policies are in force and stored (kvstore); a store failure rolls the import back. */
  import(text: string, opts?: { staged?: boolean }): Promise<{ revision: number; policies: readonly PolicyName[]; endpoints: readonly number[]; notReady: readonly EndpointNotReady[] }>;
  /** Promotes the staged policies each filter matches (every filter must match one), in one change. */
  promote?(filters: readonly PolicyFilter[]): Promise<{ revision: number; policies: readonly PolicyName[]; endpoints: readonly number[]; notReady: readonly EndpointNotReady[] }>;
  delete(filter: PolicyFilter): Promise<{ revision: number; deleted: readonly PolicyName[]; endpoints: readonly number[]; notReady: readonly EndpointNotReady[] }>;
  selectors(): ReturnType<SelectorCache['list']>;
  /** The rules of these policies whose subject selects no endpoint (nothing to enforce on). */
  selectsNoEndpoint?(names: readonly PolicyName[]): Array<{ policy: PolicyName; selector: string }>;
  trace(src: TracePeer, dst: TracePeer, proto: number, port: number): TraceResult;
  endpointPolicy(id: number): EndpointPolicy;
  /** Whether the datapath enforces endpoints' map states on packets (the eBPF datapath). */
  readonly datapathEnforced?: boolean;
}

/** /identity: reserved identities and those this node holds. */
export interface IdentityApi {
  list(): ApiIdentity[];
  get(id: number): ApiIdentity | undefined;
}

export interface IpcacheApi {
  list(): IpcacheEntry[];
}

/** /healthz, /status and /config. */
export interface HealthApi {
  /** The agent's state; with `kubernetes` not synced, /healthz answers 503 with it and /status 200. */
  health(): Promise<Health>;
  config(): AgentConfigView;
  patchConfig(patch: ConfigPatch): AgentConfigView;
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
  /** The eBPF datapath's event stream; absent without it (GET /monitor answers 409). */
  monitor?: MonitorApi;
  /** The flow history; absent without the eBPF datapath or with it sized 0 (GET /flows answers 409). */
  flows?: FlowsApi;
  /** The eBPF datapath's maps; absent without it (/bpf/* answer 409). */
  bpf?: BpfApi;
  /** Services (load-balancing in the eBPF datapath); absent without it (/service answers 409 SERVICE_UNSUPPORTED). */
  services?: ServiceApi;
  /** The node registry; absent: GET /node answers no nodes. */
  nodes?: NodeApi;
  /** Reads of the agent's kvstore; absent (servers tests build for one part): /kvstore/* answer 404. */
  kvstore?: KvstoreReadApi;
  /** The Prometheus metrics; absent (servers tests build for one part): GET /metrics answers 500. */
  metrics?: MetricsApi;
}

/** /metrics: the Prometheus exposition text of the agent's registry. */
export interface MetricsApi {
  render(): Promise<string>;
  readonly contentType: string;
}

export interface ServerOptions {
  /** Check every response against api/openapi.yaml (default: $TENDRIL_VALIDATE_RESPONSES is 1). */
  validateResponses?: boolean;
  /** How long a client has to send a whole request, headers and body (default API_REQUEST_TIMEOUT_MS). */
  requestTimeoutMs?: number;
  /** The document served (default: api/openapi.yaml). */
  spec?: OpenApiSchemas;
}

function endpointRef(endpoints: EndpointApi, ref: string): EndpointStatus {
  if (!ENDPOINT_REF.test(ref)) {
    throw new AgentError('INVALID_REQUEST', `invalid endpoint ID "${ref}": use <number>, container-id:<id>, pod-name:<namespace>:<name>, ipv4:<ip> or ipv6:<ip>`);
  }
  const ep = endpoints.lookup(ref);
  if (!ep) throw new AgentError('NOT_FOUND', `endpoint ${ref} not found`);
  return ep;
}

/**
 * What a policy change does to the endpoints it touches: `regenerated` are
 * those whose new policy goes in force, `notReady` those whose new map state
 * does not fit (they go not-ready and keep their previous policy). Counting
 * the second among the first told a user "regenerated" for endpoints that
 * were not.
 */
function regenerationOutcome(r: { endpoints: readonly number[]; notReady: readonly EndpointNotReady[] }): { regenerated: number[]; notReady: Array<{ endpoint: number; reason: string }> } {
  const failed = new Set(r.notReady.map((n) => n.endpoint));
  return { regenerated: r.endpoints.filter((id) => !failed.has(id)), notReady: r.notReady.map((n) => ({ endpoint: n.endpoint, reason: n.reason })) };
}

/** Which resources a not yet synced Kubernetes watch still lists. */
export function k8sNotSyncedMessage(k: K8sStatus): string {
  const pending = k.resources.filter((r) => !r.synced).map((r) => r.resource);
  return `Kubernetes not synced yet (API server ${k.apiServer}${k.connected ? '' : ', not connected'}): ${pending.length > 0 ? pending.join(', ') : 'no resource listed yet'}`;
}

const servedByApp = new WeakMap<FastifyInstance, ServedRoute[]>();

/** The routes a server built by buildServer serves, as fastify registered them. */
export function servedRoutes(app: FastifyInstance): readonly ServedRoute[] {
  const routes = servedByApp.get(app);
  if (!routes) throw new Error('servedRoutes: not a server buildServer built');
  return routes;
}

/**
 * Gives a route what the document says of its operation: the request body
 * and query schemas it is validated with, and the body limit its schema
 * implies (bodyLimit.ts). A route the document does not describe is left
 * alone; the route coverage test names it.
 */
function applySpec(spec: OpenApiSchemas, route: RouteOptions): void {
  const methods = [route.method].flat();
  const op = methods.length === 1 ? spec.operationAt(methods[0]!, route.url) : undefined;
  if (!op) return;
  const body = route.schema?.body ?? spec.body(op.path, op.method);
  const querystring = route.schema?.querystring ?? spec.query(op.path, op.method);
  route.schema = { ...route.schema, ...(body ? { body } : {}), ...(querystring ? { querystring } : {}) };
  const limit = spec.bodyLimit(op.path, op.method);
  if (limit !== undefined) route.bodyLimit ??= limit;
}

/**
 * The test mode: each response, success or error, is checked against the
 * declared response of its operation and status. A mismatch is logged and
 * answered as a 500 naming the operation, the status and what is wrong, so
 * the test that caused it fails where it happened.
 */
function validateResponses(app: FastifyInstance, spec: OpenApiSchemas, log: Logger): void {
  const validator = new ResponseValidator(spec);
  app.addHook('onSend', async (req, reply, payload) => {
    const url = req.routeOptions.url;
    // Unknown routes (the not-found handler) belong to no operation.
    const op = url === undefined ? undefined : spec.operationAt(req.method, url);
    if (!op) return payload;
    const status = reply.statusCode;
    const problem = validator.check(op.operationId, { status, headers: reply.getHeaders(), body: payload });
    if (problem === undefined) return payload;
    const message = `response of ${op.operationId} (${status}) does not match api/openapi.yaml: ${problem}`;
    log.error({ operationId: op.operationId, status, problem, url: req.url }, RESPONSE_MISMATCH);
    // The headers of the response that was refused (tendril-cni's exit code) do not belong to the 500.
    for (const name of Object.keys((spec.response(op.operationId, status)?.headers as object | undefined) ?? {})) reply.removeHeader(name);
    reply.code(500).type('application/json; charset=utf-8');
    return JSON.stringify(new AgentError('INTERNAL', message).toResponse());
  });
}

/**
 * A client has this long to send a whole request, headers and body: every
 * body the document admits is at most about a MiB, written at once over a
 * local socket. Without it (fastify's default is no limit) a client sending a
 * chunked body that never ends held its connection, and the memory of what it
 * sent, for as long as it liked. The time the agent takes to answer is not
 * counted: that is each operation's own (a CNI ADD may take minutes).
 */
export const API_REQUEST_TIMEOUT_MS = 10_000;

/**
 * How often node:http looks for requests past their time (its default, 30 s,
 * would let one overrun the limit threefold). Limit plus this is the
 * longest a request can take to arrive.
 */
function timeoutCheckInterval(requestTimeoutMs: number): number {
  return Math.max(50, Math.min(1000, Math.floor(requestTimeoutMs / 4)));
}

/** `/healthz` (and its query) as `/v1/healthz`; every other URL as it is. */
export function unversionedHealthz(url: string | undefined): string {
  const u = url ?? '/';
  return u === '/healthz' || u.startsWith('/healthz?') ? `/v1${u}` : u;
}

/** How an API server is built: its document, its checks, its log; `serverFactory` for TLS (the flows listener). */
export interface ApiAppOptions extends ServerOptions {
  log: Logger;
  /** Makes the HTTP server fastify serves on (an https.Server for TLS); default node:http's. */
  serverFactory?: (handler: (req: IncomingMessage, res: ServerResponse) => void, opts: { requestTimeout: number; headersTimeout: number; connectionsCheckingInterval: number }) => HttpServer;
}

/**
 * A fastify instance with the API's rules and no route: requests checked
 * against the document (query and body schemas, body limits, repeated JSON
 * keys), errors as ErrorResponse, request deadlines. The agent's socket API
 * and the read-only flows listener are both built on it.
 */
export function createApiApp(opts: ApiAppOptions): FastifyInstance {
  const spec = opts.spec ?? new OpenApiSchemas();
  const requestTimeout = opts.requestTimeoutMs ?? API_REQUEST_TIMEOUT_MS;
  const http = { requestTimeout, headersTimeout: requestTimeout, connectionsCheckingInterval: timeoutCheckInterval(requestTimeout) };
  const factory = opts.serverFactory;
  const app = Fastify({
    logger: false,
    // HEAD routes are not in the document, so fastify does not add them.
    exposeHeadRoutes: false,
    // Both bounds are node:http's (answered 408, then the connection is closed); headers are part of the request.
    requestTimeout,
    http,
    ...(factory ? { serverFactory: (handler: (req: IncomingMessage, res: ServerResponse) => void) => factory(handler, http) } : {}),
    // GET /healthz, as probes and the docs ask for it, is GET /v1/healthz: the same operation, not a second route.
    rewriteUrl: (req) => unversionedHealthz(req.url),
  });
  // JSON bodies as fastify parses them (secure-json-parse: __proto__ and constructor refused), once no key repeats.
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    const duplicate = findDuplicateKey(body as string);
    if (duplicate) {
      done(new AgentError('INVALID_REQUEST', `invalid JSON body: key ${JSON.stringify(duplicate.key)} appears more than once in the object at ${duplicate.path === '' ? 'the top level' : duplicate.path}; a key may be given once`), undefined);
      return;
    }
    parseJson(req, body as string, done);
  });

  const served: ServedRoute[] = [];
  servedByApp.set(app, served);
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) served.push({ method, url: route.url });
    applySpec(spec, route);
  });
  app.setValidatorCompiler(requestValidatorCompiler());
  if (opts.validateResponses ?? process.env[VALIDATE_RESPONSES_ENV] === '1') validateResponses(app, spec, opts.log);

  app.setErrorHandler((err: FastifyError, req, reply) => {
    if (err.validation) {
      const e = new AgentError('INVALID_REQUEST', `invalid request: ${err.message}`);
      return reply.status(e.httpStatus).send(e.toResponse());
    }
    if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      const e = new AgentError('INVALID_REQUEST', `request body too large: the schema of ${req.method} ${req.routeOptions.url ?? req.url} admits at most ${req.routeOptions.bodyLimit} bytes`);
      return reply.status(413).send(e.toResponse());
    }
    if (err.statusCode && err.statusCode < 500 && !(err instanceof AgentError)) {
      const e = new AgentError('INVALID_REQUEST', err.message);
      return reply.status(err.statusCode).send(e.toResponse());
    }
    const e = toAgentError(err);
    if (e.httpStatus >= 500) opts.log.error({ err, code: e.code }, 'API request failed');
    return reply.status(e.httpStatus).send(e.toResponse());
  });
  app.setNotFoundHandler((req, reply) => {
    const e = new AgentError('NOT_FOUND', `no route ${req.method} ${req.url}`);
    return reply.status(404).send(e.toResponse());
  });
  return app;
}

/** GET /v1/healthz (and /healthz): the agent's state, 503 until Kubernetes is synced. */
export function registerHealthzRoute(app: FastifyInstance, health: Pick<HealthApi, 'health'>): void {
  app.get('/v1/healthz', async (): Promise<ResponseBody<'getHealthz', 200>> => {
    const h = await health.health();
    // Before the first sync the agent would enforce an incomplete picture of the cluster: not healthy yet.
    if (h.kubernetes && !h.kubernetes.synced) throw new AgentError('NOT_READY', k8sNotSyncedMessage(h.kubernetes));
    return h;
  });
}

/** GET /v1/policy: the policies in force (read-only; the socket API and the flows listener serve it alike). */
export function registerPolicyReadRoute(app: FastifyInstance, policy: PolicyReadApi): void {
  app.get('/v1/policy', async (req): Promise<ResponseBody<'getPolicy', 200>> => {
    const policies = policy.list(policyFilter(req.query as QueryParams<'getPolicy'>));
    const lost = policy.lost?.() ?? [];
    return {
      revision: policy.revision,
      clusterRevision: policy.clusterRevision ?? 0,
      policies: policies.map((p) => ({ name: formatPolicyName(p.name), document: p.document as Record<string, unknown>, ...(p.staged === true ? { staged: true } : {}) })),
      ...(lost.length > 0 ? { lost: lost.map(formatPolicyName) } : {}),
    };
  });
}

function policyFilter(q: { name?: string; namespace?: string; label?: string | string[] }): PolicyFilter {
  return {
    ...(q.name ? { name: q.name } : {}),
    ...(q.namespace !== undefined ? { namespace: q.namespace } : {}),
    ...(q.label ? { labels: Array.isArray(q.label) ? q.label : [q.label] } : {}),
  };
}

/** The agent's REST API (api/openapi.yaml), validated against that document. */
export function buildServer(agent: AgentApi, opts: ServerOptions = {}): FastifyInstance {
  const spec = opts.spec ?? new OpenApiSchemas();
  const app = createApiApp({ ...opts, spec, log: agent.log });
  const { endpoints, ipam, policy, identities, ipcache, health } = agent;

  registerHealthzRoute(app, health);
  app.get('/v1/status', async (): Promise<ResponseBody<'getStatus', 200>> => health.health());

  app.get('/v1/metrics', async (_req, reply): Promise<string> => {
    if (!agent.metrics) throw new AgentError('INTERNAL', 'this server has no metrics registry');
    const text = await agent.metrics.render();
    reply.type(agent.metrics.contentType);
    return text;
  });

  app.get('/v1/config', async (): Promise<ResponseBody<'getConfig', 200>> => health.config());
  app.patch('/v1/config', async (req): Promise<ResponseBody<'patchConfig', 200>> => health.patchConfig(req.body as ConfigPatch));

  app.get('/v1/ipam', async (): Promise<ResponseBody<'listIpam', 200>> => {
    const stats = ipam.stats();
    return { mode: ipam.mode, allocations: (await ipam.list()).map(allocationBody), ...(stats ? { stats } : {}) };
  });

  const allocate = async (q: QueryParams<'postIpam'>, ip: string | undefined, expirationHeader: unknown): Promise<ResponseBody<'postIpam', 201>> => {
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
  app.post('/v1/ipam', async (req, reply): Promise<ResponseBody<'postIpam', 201>> => {
    const r = await allocate(req.query as QueryParams<'postIpam'>, undefined, req.headers.expiration);
    reply.status(201);
    return r;
  });
  app.post('/v1/ipam/:ip', async (req, reply): Promise<ResponseBody<'postIpamIp', 201>> => {
    const r = await allocate(req.query as QueryParams<'postIpamIp'>, (req.params as PathParams<'postIpamIp'>).ip, req.headers.expiration);
    reply.status(201);
    return r;
  });

  app.delete('/v1/ipam/:ip', async (req): Promise<ResponseBody<'deleteIpamIp', 200>> => {
    const { ip } = req.params as PathParams<'deleteIpamIp'>;
    if (ipFamily(ip) === 0) throw new AgentError('INVALID_REQUEST', `"${ip}" is not an IP address`);
    await ipam.release(ip);
    return { released: ip };
  });

  app.get('/v1/endpoint', async (): Promise<ResponseBody<'listEndpoints', 200>> => endpoints.list().map(endpointBody));
  app.get('/v1/endpoint/:id', async (req): Promise<ResponseBody<'getEndpoint', 200>> => endpointBody(endpointRef(endpoints, (req.params as PathParams<'getEndpoint'>).id)));
  app.put('/v1/endpoint/:id', async (req, reply): Promise<ResponseBody<'putEndpoint', 201>> => {
    const ref = (req.params as PathParams<'putEndpoint'>).id;
    const body = req.body as EndpointAdoptionBody;
    let id: number | undefined;
    if (/^\d{1,5}$/.test(ref)) {
      id = Number(ref);
      if (id < 1 || id > 0xffff) throw new AgentError('INVALID_REQUEST', `endpoint ID ${ref} is out of range 1-65535`);
    } else if (ref !== `container-id:${body.containerId}`) {
      throw new AgentError('INVALID_REQUEST', 'PUT /endpoint/{id} takes a number or container-id:<the body\'s containerId>');
    }
    const ep = await endpoints.adopt({ ...body, ...(id !== undefined ? { id } : {}) });
    reply.status(201);
    return endpointBody(ep);
  });
  app.delete('/v1/endpoint/:id', async (req): Promise<ResponseBody<'deleteEndpoint', 200>> => {
    const ep = endpointRef(endpoints, (req.params as PathParams<'deleteEndpoint'>).id);
    await endpoints.delete(ep.id);
    return { deleted: ep.id };
  });

  app.patch('/v1/endpoint/:id/labels', async (req): Promise<ResponseBody<'patchEndpointLabels', 200>> => {
    const ep = endpointRef(endpoints, (req.params as PathParams<'patchEndpointLabels'>).id);
    const labels = patchedLabels(ep, req.body as LabelsPatch, 'PATCH /endpoint/{id}/labels');
    return endpointBody(await endpoints.updateLabels(ep.id, labels));
  });

  app.get('/v1/identity', async (): Promise<ResponseBody<'listIdentities', 200>> => identities.list());
  app.get('/v1/identity/:id', async (req): Promise<ResponseBody<'getIdentity', 200>> => {
    const text = (req.params as PathParams<'getIdentity'>).id;
    let id: number;
    try {
      id = parseIdentityNumber(text);
    } catch (err) {
      // An identity number out of range is the request's fault, not a reason to try again.
      throw new AgentError('INVALID_REQUEST', `invalid identity "${text}": ${(err as Error).message}`, '', undefined, { cause: err });
    }
    const identity = identities.get(id);
    if (!identity) throw new AgentError('NOT_FOUND', `identity ${text} not found`);
    return identity;
  });
  app.get('/v1/ip', async (): Promise<ResponseBody<'listIpcache', 200>> => ipcache.list().map(ipcacheEntryBody));

  registerPolicyReadRoute(app, policy);
  app.post('/v1/policy/confirm-loss', async (): Promise<ResponseBody<'confirmPolicyLoss', 200>> => {
    const r = policy.confirmLoss ? await policy.confirmLoss() : { revision: policy.revision, dropped: [], endpoints: [] };
    return { revision: r.revision, dropped: r.dropped.map(formatPolicyName), regenerated: [...r.endpoints] };
  });
  app.put('/v1/policy', async (req): Promise<ResponseBody<'putPolicy', 200>> => {
    const body = req.body as PolicyImport;
    const r = await policy.import(body.text, body.staged === true ? { staged: true } : {});
    const unselected = policy.selectsNoEndpoint?.(r.policies) ?? [];
    return {
      revision: r.revision,
      policies: r.policies.map(formatPolicyName),
      ...regenerationOutcome(r),
      selectsNoEndpoint: unselected.map((u) => ({ policy: formatPolicyName(u.policy), selector: u.selector })),
    };
  });
  app.delete('/v1/policy', async (req): Promise<ResponseBody<'deletePolicy', 200>> => {
    const q = req.query as QueryParams<'deletePolicy'>;
    const filter = policyFilter(q);
    // An empty filter deletes everything: demand that be said out loud.
    if (Object.keys(filter).length === 0 && q.all !== true) throw new AgentError('INVALID_REQUEST', 'give name, namespace or label to select policies, or all=true to delete every policy');
    const r = await policy.delete(filter);
    return { revision: r.revision, deleted: r.deleted.map(formatPolicyName), ...regenerationOutcome(r) };
  });
  app.post('/v1/policy/promote', async (req): Promise<ResponseBody<'promotePolicy', 200>> => {
    const body = req.body as PolicyPromote;
    const names = body.names ?? [];
    if (names.length === 0 && body.namespace === undefined && body.all !== true) throw new AgentError('INVALID_REQUEST', 'give names or a namespace to select staged policies, or all=true to promote every one');
    if (!policy.promote) throw new AgentError('INVALID_REQUEST', 'this agent does not store policies: nothing to promote');
    const ns = body.namespace !== undefined ? { namespace: body.namespace } : {};
    const filters: PolicyFilter[] = names.length > 0 ? names.map((name) => ({ name, ...ns })) : [ns];
    const r = await policy.promote(filters);
    return { revision: r.revision, promoted: r.policies.map(formatPolicyName), ...regenerationOutcome(r) };
  });
  app.get('/v1/policy/selectors', async (): Promise<ResponseBody<'getPolicySelectors', 200>> => policy.selectors());
  app.post('/v1/policy/trace', async (req): Promise<ResponseBody<'tracePolicy', 200>> => {
    const body = req.body as PolicyTrace;
    const { src, dst, notes } = resolveTracePeers(body, {
      endpoint: (ref) => (ENDPOINT_REF.test(ref) ? endpoints.lookup(ref) : undefined),
      identityExists: (id) => identities.get(id) !== undefined,
      endpointsWithLabels: (labels) => endpoints.list().filter((e) => LabelSet.parse(e.labels).equals(labels)).map((e) => e.id),
    });
    const { port, proto } = parsePortProtocol(body.dport);
    const result = traceBody(policy.trace(src, dst, proto, port));
    return { ...result, text: [...notes, ...result.text] };
  });
  app.get('/v1/endpoint/:id/policy', async (req): Promise<ResponseBody<'getEndpointPolicy', 200>> => {
    const ep = endpointRef(endpoints, (req.params as PathParams<'getEndpointPolicy'>).id);
    return endpointPolicyBody(policy.endpointPolicy(ep.id), policy.revision, ep.policyRevision, policy.datapathEnforced === true);
  });

  registerMonitorRoute(app, agent.monitor, agent.log);
  registerFlowsRoute(app, agent.flows, agent.log);
  registerBpfRoutes(app, agent.bpf);
  registerServiceRoutes(app, agent.services);
  registerNodeRoutes(app, agent.nodes);
  registerKvstoreRoutes(app, agent.kvstore);

  app.post('/v1/cni', { schema: { body: spec.body('/cni', 'post') } }, cniRoute(agent.cni, agent.log));

  return app;
}

/**
 * Whether the API socket path may be used: 'free' (nothing there) or 'stale'
 * (a socket file nobody listens on, left over from a crash). An agent
 * answering there, or anything that is not a socket (a regular file, a
 * symlink, a directory), is refused and left as it is.
 */
export async function checkSocketPath(path: string): Promise<'free' | 'stale'> {
  let st;
  try {
    st = await lstat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'free';
    throw err;
  }
  if (!st.isSocket()) throw new OwnershipError('SOCKET_PATH_TAKEN', `socket path ${path} exists and is not a socket; not replacing it (nothing was changed)`);
  const answer = await new Promise<'live' | 'refused' | 'gone' | NodeJS.ErrnoException>((resolve) => {
    const s = connect(path);
    // A stopped agent still accepts into its backlog; one that takes longer than this to connect is there too.
    s.setTimeout(2000, () => {
      s.destroy();
      resolve('live');
    });
    s.once('connect', () => {
      s.destroy();
      resolve('live');
    });
    s.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ECONNREFUSED') resolve('refused');
      else if (err.code === 'ENOENT') resolve('gone');
      // A full backlog means someone listens.
      else if (err.code === 'EAGAIN') resolve('live');
      else resolve(err);
    });
  });
  if (answer === 'live') throw new OwnershipError('SOCKET_SERVED', `another agent is serving ${path} (nothing was changed)`);
  if (answer === 'gone') return 'free';
  if (answer === 'refused') return 'stale';
  throw answer;
}

/** A socket file nobody listens on is left over from a crash: remove it; refuse if an agent answers or it is no socket. */
async function clearStaleSocket(path: string): Promise<void> {
  if ((await checkSocketPath(path)) === 'stale') await rm(path, { force: true });
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
