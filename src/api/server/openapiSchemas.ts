import { existsSync, readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { installPath } from '../../installLayout.js';
import { longestJsonBytes } from './bodyLimit.js';

/** The API's document, api/openapi.yaml. */
export const OPENAPI_PATH = installPath('api', 'openapi.yaml');
/**
 * The same document as JSON, written by `make build` (dist/api/openapi.json):
 * parsing the YAML took a fifth of a second of every agent's start, the JSON
 * a few milliseconds.
 */
export const OPENAPI_JSON_PATH = installPath('dist', 'api', 'openapi.json');

function readDocument(path: string): Record<string, unknown> {
  if (path === OPENAPI_PATH && existsSync(OPENAPI_JSON_PATH)) return JSON.parse(readFileSync(OPENAPI_JSON_PATH, 'utf8')) as Record<string, unknown>;
  return parseYaml(readFileSync(path, 'utf8')) as Record<string, unknown>;
}

type Json = Record<string, unknown>;

export const HTTP_METHODS = ['get', 'put', 'post', 'patch', 'delete'] as const;
export type HttpMethod = (typeof HTTP_METHODS)[number];

/** One operation of the document and the route that serves it. */
export interface SpecOperation {
  operationId: string;
  method: HttpMethod;
  /** As the document writes it: /endpoint/{id}. */
  path: string;
  /** As fastify routes it, under the server's base path: /v1/endpoint/:id. */
  url: string;
}

/** A route a server serves, as fastify's onRoute hook reports it. */
export interface ServedRoute {
  method: string;
  url: string;
}

/** A route's key: upper-case method and URL. */
export const routeKey = (method: string, url: string): string => `${method.toUpperCase()} ${url}`;

/**
 * api/openapi.yaml as the agent reads it: operations, their request schemas
 * (for validating requests), their responses (for validating responses in
 * tests) and the body limits the schemas imply. Component $refs are inlined,
 * because fastify's validator sees one schema per route.
 */
export class OpenApiSchemas {
  private readonly doc: Json;
  private readonly byRoute = new Map<string, SpecOperation>();
  private readonly byId = new Map<string, SpecOperation>();
  /** Resolved responses by operation and status: the response validator asks for one per response. */
  private readonly responses = new Map<string, Json | undefined>();
  /** The path of the server URL, prefixed to every route: /v1. */
  readonly basePath: string;

  constructor(path: string = OPENAPI_PATH) {
    this.doc = readDocument(path);
    const server = ((this.doc.servers as Json[] | undefined)?.[0]?.url as string | undefined) ?? 'http://localhost/';
    this.basePath = new URL(server).pathname.replace(/\/$/, '');
    for (const [p, item] of Object.entries(this.doc.paths as Json)) {
      for (const method of HTTP_METHODS) {
        const op = (item as Json)[method] as Json | undefined;
        if (!op) continue;
        if (typeof op.operationId !== 'string') throw new Error(`openapi: ${method.toUpperCase()} ${p} has no operationId`);
        if (this.byId.has(op.operationId)) throw new Error(`openapi: operationId ${op.operationId} is used twice`);
        const o: SpecOperation = { operationId: op.operationId, method, path: p, url: `${this.basePath}${p.replace(/\{(\w+)\}/g, ':$1')}` };
        this.byId.set(o.operationId, o);
        this.byRoute.set(routeKey(method, o.url), o);
      }
    }
  }

  /** Every operation, in document order. */
  operations(): SpecOperation[] {
    return [...this.byId.values()];
  }

  /** The operation a route serves, if the document has one. */
  operationAt(method: string, url: string): SpecOperation | undefined {
    return this.byRoute.get(routeKey(method, url));
  }

  operationById(operationId: string): SpecOperation {
    const op = this.byId.get(operationId);
    if (!op) throw new Error(`openapi: no operation ${operationId}`);
    return op;
  }

  /** Which operations a set of routes leaves out, and which routes the document does not describe. */
  compareRoutes(served: readonly ServedRoute[]): { unserved: string[]; undocumented: string[] } {
    const servedKeys = new Set(served.map((r) => routeKey(r.method, r.url)));
    return {
      unserved: [...this.byRoute.keys()].filter((k) => !servedKeys.has(k)).map((k) => `${k} (${this.byRoute.get(k)!.operationId})`),
      undocumented: [...servedKeys].filter((k) => !this.byRoute.has(k)),
    };
  }

  /** Inlines `#/...` references; the document has no recursive ones. */
  resolve(node: unknown, depth = 0): unknown {
    if (depth > 32) throw new Error('openapi: $ref nesting too deep');
    if (Array.isArray(node)) return node.map((n) => this.resolve(n, depth + 1));
    if (node === null || typeof node !== 'object') return node;
    const obj = node as Json;
    if (typeof obj.$ref === 'string') {
      if (!obj.$ref.startsWith('#/')) throw new Error(`openapi: unsupported $ref ${obj.$ref}`);
      let target: unknown = this.doc;
      for (const part of obj.$ref.slice(2).split('/')) target = (target as Json | undefined)?.[part];
      if (target === undefined) throw new Error(`openapi: unknown $ref ${obj.$ref}`);
      return this.resolve(target, depth + 1);
    }
    const out: Json = {};
    for (const [k, v] of Object.entries(obj)) out[k] = this.resolve(v, depth + 1);
    return out;
  }

  private operationObject(path: string, method: string): Json {
    const item = (this.doc.paths as Json)[path] as Json | undefined;
    const op = item?.[method] as Json | undefined;
    if (!op) throw new Error(`openapi: no operation ${method.toUpperCase()} ${path}`);
    return op;
  }

  /** The operation's parameters, path-level ones included. */
  private parameters(path: string, method: string): Json[] {
    const item = (this.doc.paths as Json)[path] as Json;
    const all = [...((item.parameters as Json[] | undefined) ?? []), ...((this.operationObject(path, method).parameters as Json[] | undefined) ?? [])];
    return all.map((p) => this.resolve(p) as Json);
  }

  /** The JSON body schema of an operation, or undefined when it takes none. */
  body(path: string, method: string): Json | undefined {
    const rb = this.operationObject(path, method).requestBody as Json | undefined;
    const schema = ((rb?.content as Json | undefined)?.['application/json'] as Json | undefined)?.schema;
    return schema ? (this.resolve(schema) as Json) : undefined;
  }

  /** The query parameters of an operation as one object schema; a parameter the document does not name is refused. */
  query(path: string, method: string): Json | undefined {
    const query = this.parameters(path, method).filter((p) => p.in === 'query');
    if (query.length === 0) return undefined;
    return {
      type: 'object',
      additionalProperties: false,
      properties: Object.fromEntries(query.map((p) => [p.name as string, p.schema])),
      required: query.filter((p) => p.required).map((p) => p.name as string),
    };
  }

  /** The body limit of an operation that takes a body: see bodyLimit.ts. */
  bodyLimit(path: string, method: string): number | undefined {
    const schema = this.body(path, method);
    return schema ? longestJsonBytes(schema, `${method.toUpperCase()} ${path} request body`) : undefined;
  }

  /** The response an operation declares for a status (or its `default`), references inlined. */
  response(operationId: string, status: number): Json | undefined {
    const key = `${operationId} ${status}`;
    if (this.responses.has(key)) return this.responses.get(key);
    const op = this.operationById(operationId);
    const responses = this.operationObject(op.path, op.method).responses as Json;
    const r = responses[String(status)] ?? responses.default;
    const resolved = r === undefined ? undefined : (this.resolve(r) as Json);
    this.responses.set(key, resolved);
    return resolved;
  }

  /** The statuses an operation declares. */
  statuses(operationId: string): string[] {
    const op = this.operationById(operationId);
    return Object.keys(this.operationObject(op.path, op.method).responses as Json);
  }

  /** A schema of components/schemas, references inlined. */
  schema(name: string): Json {
    return this.resolve({ $ref: `#/components/schemas/${name}` }) as Json;
  }
}
