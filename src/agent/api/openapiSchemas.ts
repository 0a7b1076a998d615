import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';

/** api/openapi.yaml, resolved from dist/src/agent/api/ or src/agent/api/. */
export const OPENAPI_PATH = fileURLToPath(new URL('../../../../api/openapi.yaml', import.meta.url));

type Json = Record<string, unknown>;

/**
 * The agent validates requests against the same OpenAPI document clients
 * read, so the spec cannot drift from what is enforced. Component $refs are
 * inlined, because fastify's validator sees one schema per route.
 */
export class OpenApiSchemas {
  private readonly doc: Json;

  constructor(path: string = OPENAPI_PATH) {
    this.doc = parseYaml(readFileSync(path, 'utf8')) as Json;
  }

  private resolve(node: unknown, depth = 0): unknown {
    if (depth > 32) throw new Error('openapi: $ref nesting too deep');
    if (Array.isArray(node)) return node.map((n) => this.resolve(n, depth + 1));
    if (node === null || typeof node !== 'object') return node;
    const obj = node as Json;
    if (typeof obj.$ref === 'string') {
      const m = /^#\/components\/schemas\/(.+)$/.exec(obj.$ref);
      if (!m) throw new Error(`openapi: unsupported $ref ${obj.$ref}`);
      const target = ((this.doc.components as Json).schemas as Json)[m[1]!];
      if (!target) throw new Error(`openapi: unknown schema ${m[1]}`);
      return this.resolve(target, depth + 1);
    }
    const out: Json = {};
    for (const [k, v] of Object.entries(obj)) out[k] = this.resolve(v, depth + 1);
    return out;
  }

  private operation(path: string, method: string): Json {
    const item = (this.doc.paths as Json)[path] as Json | undefined;
    const op = item?.[method] as Json | undefined;
    if (!op) throw new Error(`openapi: no operation ${method.toUpperCase()} ${path}`);
    return op;
  }

  /** The JSON body schema of an operation, or undefined when it takes none. */
  body(path: string, method: string): Json | undefined {
    const rb = this.operation(path, method).requestBody as Json | undefined;
    const schema = ((rb?.content as Json | undefined)?.['application/json'] as Json | undefined)?.schema;
    return schema ? (this.resolve(schema) as Json) : undefined;
  }

  /** The query parameters of an operation as one object schema. */
  query(path: string, method: string): Json | undefined {
    const params = (this.operation(path, method).parameters as Json[] | undefined) ?? [];
    const query = params.filter((p) => p.in === 'query');
    if (query.length === 0) return undefined;
    return {
      type: 'object',
      additionalProperties: false,
      properties: Object.fromEntries(query.map((p) => [p.name as string, this.resolve(p.schema)])),
      required: query.filter((p) => p.required).map((p) => p.name as string),
    };
  }
}
