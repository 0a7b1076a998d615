import { type IncomingHttpHeaders, request } from 'node:http';
import {
  CNI_EXIT_CODE_HEADER,
  type CniRequest,
  type ErrorResponse,
  type HeaderParams,
  type OperationId,
  type QueryParams,
  type RequestBody,
  type ResponseBody,
} from '../api/types.js';
import { CniError } from '../cni/errors.js';
import type { AnyResult } from '../cni/types.js';
import { type NdjsonStreamOptions, queryString, streamNdjson, type StreamFailures } from './ndjsonStream.js';
import type { FlowLine } from '../flow/types.js';
import type { MonitorEvent } from '../monitor/types.js';

const CONNECT_FAILURES: Record<string, string> = {
  ENOENT: 'no such file or directory',
  ECONNREFUSED: 'connection refused',
  EACCES: 'permission denied',
  ENOTSOCK: 'not a socket',
};

/**
 * Why connect() failed, as the native relay says it (`connect: no such file
 * or directory`): Node's own message (`connect ENOENT <path>`) named the
 * socket a second time after the caller had.
 */
function connectFailure(cause: NodeJS.ErrnoException, socketPath: string): string {
  const known = cause.code !== undefined ? CONNECT_FAILURES[cause.code] : undefined;
  return known !== undefined ? `connect: ${known}` : cause.message.replace(` ${socketPath}`, '');
}

/** The agent's socket could not be reached at all (not running, wrong path, no permission). */
export class AgentUnreachableError extends Error {
  constructor(
    readonly socketPath: string,
    override readonly cause: Error,
  ) {
    super(`cannot reach the tendril agent at ${socketPath}: ${connectFailure(cause, socketPath)}`);
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

/** Well under the 16 KiB of headers Node's HTTP server takes; no path of the API comes near it. */
const MAX_PATH_BYTES = 8192;

const UNREACHABLE_CODES = new Set(['ENOENT', 'ECONNREFUSED', 'EACCES', 'ENOTSOCK', 'ECONNRESET']);

type Scalar = string | number | boolean | undefined;

/** A query string of the parameters that are set, `?` included ('' when none are). */
function headerStrings(params: Record<string, Scalar>): Record<string, string> {
  return Object.fromEntries(Object.entries(params).flatMap(([k, v]) => (v === undefined ? [] : [[k, String(v)]])));
}

function scalarQuery(params: Record<string, Scalar>): string {
  return queryString(Object.entries(headerStrings(params)));
}

const seg = encodeURIComponent;

/**
 * Typed client for the agent's REST API over its unix socket: one method per
 * operation of api/openapi.yaml (CLIENT_METHODS maps each operationId to its
 * method), typed with the document's generated types.
 */
export class AgentClient {
  readonly socketPath: string;
  private readonly timeoutMs: number;

  constructor(opts: AgentClientOptions) {
    this.socketPath = opts.socketPath;
    this.timeoutMs = opts.timeoutMs ?? 120_000;
  }

  /** One HTTP exchange over the socket: status, headers and the body parsed as JSON (undefined when empty). */
  #exchange(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; headers: IncomingHttpHeaders; parsed: unknown; text: string }> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    // The agent's HTTP parser answers a longer request line with 431 and closes the
    // connection while the body is still being written (EPIPE): refuse it here instead.
    if (Buffer.byteLength(path) > MAX_PATH_BYTES) return Promise.reject(new RangeError(`request path of ${Buffer.byteLength(path)} bytes is longer than ${MAX_PATH_BYTES}`));
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
            // GET /metrics answers the Prometheus text format; every other answer is JSON.
            const plainText = /^text\/plain/i.test(res.headers['content-type'] ?? '');
            if (text !== '' && !plainText) {
              try {
                parsed = JSON.parse(text);
              } catch {
                reject(new Error(`agent answered ${res.statusCode} with a body that is not JSON: ${text.slice(0, 200)}`));
                return;
              }
            }
            resolve({ status: res.statusCode ?? 0, headers: res.headers, parsed, text });
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
   * A request as given, answered with the parsed 2xx body. The typed methods
   * below are the API; this is for what they cannot send (tests of how the
   * agent refuses requests the document forbids).
   */
  async request<T>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<T> {
    const { status, parsed } = await this.#exchange(method, path, body, headers);
    if (status >= 200 && status < 300) return parsed as T;
    throw new AgentResponseError(status, normaliseError(status, parsed));
  }

  /**
   * A CNI call as tendril-cni makes it (POST /cni answers the plugin's stdout
   * and exit code): resolves with the result ADD prints, in the config's
   * version, or undefined for the verbs that print nothing; rejects with the
   * CniError the plugin would print.
   */
  async cni(req: CniRequest): Promise<AnyResult | undefined> {
    const { status, headers, parsed, text } = await this.#exchange('POST', '/cni', req);
    const exitCode = headers[CNI_EXIT_CODE_HEADER];
    if (status !== 200 || (exitCode !== '0' && exitCode !== '1')) throw new AgentResponseError(status, normaliseError(status, parsed));
    if (exitCode === '0') return parsed as AnyResult | undefined;
    throw CniError.fromJson(parsed) ?? new Error(`agent answered exit code 1 without a CNI error: ${text.slice(0, 200)}`);
  }

  /** GET /healthz: rejects with 503 NOT_READY while Kubernetes is on and not synced yet. */
  health(): Promise<ResponseBody<'getHealthz', 200>> {
    return this.request('GET', '/healthz');
  }

  /** GET /status: the same state as /healthz, answered also while Kubernetes is not synced. */
  status(): Promise<ResponseBody<'getStatus', 200>> {
    return this.request('GET', '/status');
  }

  getConfig(): Promise<ResponseBody<'getConfig', 200>> {
    return this.request('GET', '/config');
  }

  patchConfig(patch: RequestBody<'patchConfig'>): Promise<ResponseBody<'patchConfig', 200>> {
    return this.request('PATCH', '/config', patch);
  }

  listIpam(): Promise<ResponseBody<'listIpam', 200>> {
    return this.request('GET', '/ipam');
  }

  /** POST /ipam: an address for an owner; `expiration: true` makes it provisional. */
  postIpam(query: QueryParams<'postIpam'>, headers: HeaderParams<'postIpam'> = {}): Promise<ResponseBody<'postIpam', 201>> {
    return this.request('POST', `/ipam${scalarQuery(query)}`, undefined, headerStrings(headers));
  }

  /** POST /ipam/{ip}: this address for an owner. */
  postIpamIp(ip: string, query: QueryParams<'postIpamIp'>, headers: HeaderParams<'postIpamIp'> = {}): Promise<ResponseBody<'postIpamIp', 201>> {
    return this.request('POST', `/ipam/${seg(ip)}${scalarQuery(query)}`, undefined, headerStrings(headers));
  }

  deleteIpamIp(ip: string): Promise<ResponseBody<'deleteIpamIp', 200>> {
    return this.request('DELETE', `/ipam/${seg(ip)}`);
  }

  listEndpoints(): Promise<ResponseBody<'listEndpoints', 200>> {
    return this.request('GET', '/endpoint');
  }

  /** `id`: <number>, container-id:<id>, pod-name:<namespace>:<name>, ipv4:<ip> or ipv6:<ip>. */
  getEndpoint(id: string | number): Promise<ResponseBody<'getEndpoint', 200>> {
    return this.request('GET', `/endpoint/${seg(id)}`);
  }

  /** PUT /endpoint/{id}: adopt a pod someone else plumbed; `id` is a number or container-id:<body.containerId>. */
  putEndpoint(id: string | number, body: RequestBody<'putEndpoint'>): Promise<ResponseBody<'putEndpoint', 201>> {
    return this.request('PUT', `/endpoint/${seg(id)}`, body);
  }

  deleteEndpoint(id: string | number): Promise<ResponseBody<'deleteEndpoint', 200>> {
    return this.request('DELETE', `/endpoint/${seg(id)}`);
  }

  patchEndpointLabels(id: string | number, patch: RequestBody<'patchEndpointLabels'>): Promise<ResponseBody<'patchEndpointLabels', 200>> {
    return this.request('PATCH', `/endpoint/${seg(id)}/labels`, patch);
  }

  getEndpointPolicy(id: string | number): Promise<ResponseBody<'getEndpointPolicy', 200>> {
    return this.request('GET', `/endpoint/${seg(id)}/policy`);
  }

  listIdentities(): Promise<ResponseBody<'listIdentities', 200>> {
    return this.request('GET', '/identity');
  }

  getIdentity(id: string | number): Promise<ResponseBody<'getIdentity', 200>> {
    return this.request('GET', `/identity/${seg(id)}`);
  }

  listIpcache(): Promise<ResponseBody<'listIpcache', 200>> {
    return this.request('GET', '/ip');
  }

  getPolicy(query: QueryParams<'getPolicy'> = {}): Promise<ResponseBody<'getPolicy', 200>> {
    return this.request('GET', `/policy${scalarQuery(query)}`);
  }

  putPolicy(body: RequestBody<'putPolicy'>): Promise<ResponseBody<'putPolicy', 200>> {
    return this.request('PUT', '/policy', body);
  }

  /** DELETE /policy: the policies matching every filter given; `all: true` when there is none. */
  deletePolicy(query: QueryParams<'deletePolicy'>): Promise<ResponseBody<'deletePolicy', 200>> {
    return this.request('DELETE', `/policy${scalarQuery(query)}`);
  }

  /** POST /policy/promote: staged policies become enforced, in one change. */
  promotePolicy(body: RequestBody<'promotePolicy'>): Promise<ResponseBody<'promotePolicy', 200>> {
    return this.request('POST', '/policy/promote', body);
  }

  /** POST /policy/confirm-loss: the policies the kvstore lost are dropped (the agent kept them in force until now). */
  confirmPolicyLoss(): Promise<ResponseBody<'confirmPolicyLoss', 200>> {
    return this.request('POST', '/policy/confirm-loss');
  }

  getPolicySelectors(): Promise<ResponseBody<'getPolicySelectors', 200>> {
    return this.request('GET', '/policy/selectors');
  }

  tracePolicy(body: RequestBody<'tracePolicy'>): Promise<ResponseBody<'tracePolicy', 200>> {
    return this.request('POST', '/policy/trace', body);
  }

  /** How a stream's failures reach the caller: the same errors as every other call's. */
  #streamFailures(): StreamFailures {
    return {
      status: (status, body) => new AgentResponseError(status, normaliseError(status, body)),
      connect: (err) => (err.code && UNREACHABLE_CODES.has(err.code) ? new AgentUnreachableError(this.socketPath, err) : err),
    };
  }

  /** GET /monitor: events to `onEvent` until the agent ends the stream or `opts.signal` aborts. */
  monitorEvents(query: QueryParams<'monitorEvents'>, onEvent: (e: MonitorEvent) => void, opts: NdjsonStreamOptions = {}): Promise<void> {
    const params: Array<[string, string]> = (query.type ?? []).map((t) => ['type', t]);
    if (query.endpoint !== undefined) params.push(['endpoint', String(query.endpoint)]);
    if (query.identity !== undefined) params.push(['identity', String(query.identity)]);
    return streamNdjson({ socketPath: this.socketPath }, `/v1/monitor${queryString(params)}`, onEvent, opts, this.#streamFailures());
  }

  /**
   * GET /flows: the flow history's lines to `onLine` (filter parameters as
   * `tendril observe`'s), until the agent ends the answer (at once without
   * `follow`) or `opts.signal` aborts.
   */
  listFlows(params: Iterable<[string, string]>, onLine: (line: FlowLine) => void, opts: NdjsonStreamOptions = {}): Promise<void> {
    return streamNdjson({ socketPath: this.socketPath }, `/v1/flows${queryString(params)}`, onLine, opts, this.#streamFailures());
  }

  /** GET /metrics: the Prometheus exposition text. */
  async metrics(): Promise<string> {
    const { status, parsed, text } = await this.#exchange('GET', '/metrics');
    if (status >= 200 && status < 300) return text;
    throw new AgentResponseError(status, normaliseError(status, parsed));
  }

  listBpfEndpoints(): Promise<ResponseBody<'listBpfEndpoints', 200>> {
    return this.request('GET', '/bpf/endpoints');
  }

  listBpfIpcache(): Promise<ResponseBody<'listBpfIpcache', 200>> {
    return this.request('GET', '/bpf/ipcache');
  }

  getBpfPolicy(id: string | number): Promise<ResponseBody<'getBpfPolicy', 200>> {
    return this.request('GET', `/bpf/policy/${seg(id)}`);
  }

  listBpfConntrack(query: QueryParams<'listBpfConntrack'> = {}): Promise<ResponseBody<'listBpfConntrack', 200>> {
    return this.request('GET', `/bpf/ct${scalarQuery(query)}`);
  }

  flushBpfConntrack(): Promise<ResponseBody<'flushBpfConntrack', 200>> {
    return this.request('DELETE', '/bpf/ct');
  }

  gcBpfConntrack(): Promise<ResponseBody<'gcBpfConntrack', 200>> {
    return this.request('POST', '/bpf/ct/gc');
  }

  listBpfMetrics(): Promise<ResponseBody<'listBpfMetrics', 200>> {
    return this.request('GET', '/bpf/metrics');
  }

  listBpfLoadBalancer(): Promise<ResponseBody<'listBpfLoadBalancer', 200>> {
    return this.request('GET', '/bpf/lb');
  }

  listBpfNat(): Promise<ResponseBody<'listBpfNat', 200>> {
    return this.request('GET', '/bpf/nat');
  }

  listServices(): Promise<ResponseBody<'listServices', 200>> {
    return this.request('GET', '/service');
  }

  getService(id: string | number): Promise<ResponseBody<'getService', 200>> {
    return this.request('GET', `/service/${seg(id)}`);
  }

  /** PUT /service/{id}: creates or replaces the service; the same body again changes nothing. */
  putService(id: string | number, body: RequestBody<'putService'>): Promise<ResponseBody<'putService', 200 | 201>> {
    return this.request('PUT', `/service/${seg(id)}`, body);
  }

  /** PATCH /service: a batch of upserts and deletes applied in order; what each did. */
  applyServices(body: RequestBody<'applyServices'>): Promise<ResponseBody<'applyServices', 200>> {
    return this.request('PATCH', '/service', body);
  }

  deleteService(id: string | number): Promise<ResponseBody<'deleteService', 200>> {
    return this.request('DELETE', `/service/${seg(id)}`);
  }

  /** GET /node: every node in the registry, this one included. */
  listNodes(): Promise<ResponseBody<'listNodes', 200>> {
    return this.request('GET', '/node');
  }

  getNode(name: string): Promise<ResponseBody<'getNode', 200>> {
    return this.request('GET', `/node/${seg(name)}`);
  }

  /** GET /kvstore/keys: the agent's kvstore under a prefix, read-only. */
  listKvstoreKeys(prefix?: string): Promise<ResponseBody<'listKvstoreKeys', 200>> {
    return this.request('GET', `/kvstore/keys${scalarQuery({ prefix })}`);
  }

  getKvstoreKey(key: string): Promise<ResponseBody<'getKvstoreKey', 200>> {
    return this.request('GET', `/kvstore/key${scalarQuery({ key })}`);
  }
}

/** The client method of each operation of api/openapi.yaml; a test checks it against the document both ways. */
export const CLIENT_METHODS = {
  getHealthz: 'health',
  getStatus: 'status',
  listKvstoreKeys: 'listKvstoreKeys',
  getKvstoreKey: 'getKvstoreKey',
  getConfig: 'getConfig',
  patchConfig: 'patchConfig',
  listIpam: 'listIpam',
  postIpam: 'postIpam',
  postIpamIp: 'postIpamIp',
  deleteIpamIp: 'deleteIpamIp',
  listEndpoints: 'listEndpoints',
  getEndpoint: 'getEndpoint',
  putEndpoint: 'putEndpoint',
  deleteEndpoint: 'deleteEndpoint',
  patchEndpointLabels: 'patchEndpointLabels',
  getEndpointPolicy: 'getEndpointPolicy',
  listIdentities: 'listIdentities',
  getIdentity: 'getIdentity',
  listIpcache: 'listIpcache',
  getPolicy: 'getPolicy',
  putPolicy: 'putPolicy',
  deletePolicy: 'deletePolicy',
  confirmPolicyLoss: 'confirmPolicyLoss',
  promotePolicy: 'promotePolicy',
  getPolicySelectors: 'getPolicySelectors',
  tracePolicy: 'tracePolicy',
  monitorEvents: 'monitorEvents',
  listFlows: 'listFlows',
  getMetrics: 'metrics',
  listBpfEndpoints: 'listBpfEndpoints',
  listBpfIpcache: 'listBpfIpcache',
  getBpfPolicy: 'getBpfPolicy',
  listBpfConntrack: 'listBpfConntrack',
  flushBpfConntrack: 'flushBpfConntrack',
  gcBpfConntrack: 'gcBpfConntrack',
  listBpfMetrics: 'listBpfMetrics',
  listBpfLoadBalancer: 'listBpfLoadBalancer',
  listBpfNat: 'listBpfNat',
  listServices: 'listServices',
  getService: 'getService',
  putService: 'putService',
  applyServices: 'applyServices',
  deleteService: 'deleteService',
  listNodes: 'listNodes',
  getNode: 'getNode',
  postCni: 'cni',
} as const satisfies Record<OperationId, keyof AgentClient>;

function normaliseError(status: number, body: unknown): ErrorResponse {
  const b = body as Partial<ErrorResponse> | undefined;
  if (b && typeof b.code === 'string' && typeof b.message === 'string') {
    return { code: b.code, message: b.message, cniCode: typeof b.cniCode === 'number' ? b.cniCode : 999, ...(b.details ? { details: b.details } : {}) };
  }
  // Framework-level errors (e.g. fastify's own 404 or validation errors) have another shape.
  const msg = (body as { message?: unknown } | undefined)?.message;
  return { code: status === 404 ? 'NOT_FOUND' : status < 500 ? 'INVALID_REQUEST' : 'INTERNAL', message: typeof msg === 'string' ? msg : `HTTP ${status}`, cniCode: status < 500 ? 7 : 999 };
}
