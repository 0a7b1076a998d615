import type { ValidateFunction } from 'ajv/dist/2020.js';
import type { OpenApiSchemas } from './openapiSchemas.js';
import { describeErrors, newAjv } from './validatorCompiler.js';

type Json = Record<string, unknown>;

/** A response as the server is about to send it. */
export interface SentResponse {
  status: number;
  /** Header names in lower case, as fastify's reply.getHeaders() gives them. */
  headers: Record<string, unknown>;
  /** The serialized body: a string or Buffer, or nothing. */
  body: unknown;
}

const JSON_MEDIA_TYPE = 'application/json';
/** The message of the log line a mismatch gives (the e2e harness looks for it). */
export const RESPONSE_MISMATCH = 'API response does not match api/openapi.yaml';

/**
 * Checks responses against the operation's declared response for their
 * status: the status must be declared; a JSON body must match the schema of
 * its media type; a response declared without content must have no body, and
 * one declared with content must have one unless it says
 * `x-tendril-empty-body: true`; a required header must be present and match
 * its schema. Validators are compiled once per operation and status.
 */
export class ResponseValidator {
  private readonly ajv = newAjv({ coerce: false });
  private readonly compiled = new Map<string, ValidateFunction>();

  constructor(private readonly spec: OpenApiSchemas) {}

  private validator(key: string, schema: unknown): ValidateFunction {
    let v = this.compiled.get(key);
    if (!v) {
      v = this.ajv.compile(schema as object);
      this.compiled.set(key, v);
    }
    return v;
  }

  /** What is wrong with a response of an operation, or undefined when it is what the document says. */
  check(operationId: string, res: SentResponse): string | undefined {
    const declared = this.spec.response(operationId, res.status);
    if (!declared) return `status ${res.status} is not declared (declared: ${this.spec.statuses(operationId).join(', ')})`;
    return this.checkHeaders(operationId, res, declared) ?? this.checkBody(operationId, res, declared);
  }

  private checkHeaders(operationId: string, res: SentResponse, declared: Json): string | undefined {
    for (const [name, h] of Object.entries((declared.headers as Record<string, Json> | undefined) ?? {})) {
      const value = res.headers[name.toLowerCase()];
      if (value === undefined) {
        if (h.required === true) return `required header ${name} is missing`;
        continue;
      }
      const schema = h.schema as Json | undefined;
      if (!schema) continue;
      const v = this.validator(`${operationId} ${res.status} header ${name}`, schema);
      if (!v(headerValue(String(value), schema))) return `header ${name}: "${String(value)}" ${describeErrors(v.errors)}`;
    }
    return undefined;
  }

  private checkBody(operationId: string, res: SentResponse, declared: Json): string | undefined {
    const text = bodyText(res.body);
    if (text === undefined) return `body of type ${typeof res.body} cannot be checked (a stream?)`;
    const content = declared.content as Record<string, Json> | undefined;
    const contentType = res.headers['content-type'];
    const mediaType = typeof contentType === 'string' ? contentType.split(';')[0]!.trim().toLowerCase() : undefined;
    if (text === '') {
      if (!content || declared['x-tendril-empty-body'] === true) return undefined;
      return `the body is empty; the document declares ${Object.keys(content).join(', ')}`;
    }
    if (!content) return `the document declares no body, the response has ${Buffer.byteLength(text)} bytes`;
    if (mediaType === undefined || !(mediaType in content)) return `content type ${mediaType ?? '(none)'} is not declared (declared: ${Object.keys(content).join(', ')})`;
    if (mediaType !== JSON_MEDIA_TYPE) return undefined;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      return `the body is not JSON: ${(err as Error).message}`;
    }
    const schema = content[mediaType]!.schema;
    if (schema === undefined) return undefined;
    const v = this.validator(`${operationId} ${res.status} ${mediaType}`, schema);
    return v(parsed) ? undefined : `body ${describeErrors(v.errors)}`;
  }
}

function bodyText(body: unknown): string | undefined {
  if (body === null || body === undefined) return '';
  if (typeof body === 'string') return body;
  if (Buffer.isBuffer(body)) return body.toString('utf8');
  return undefined;
}

/** A header's text as the type its schema declares, so "0" can match `type: integer`. */
function headerValue(text: string, schema: Json): unknown {
  const types = [schema.type].flat();
  if ((types.includes('integer') || types.includes('number')) && /^-?\d+(\.\d+)?$/.test(text)) return Number(text);
  if (types.includes('boolean') && (text === 'true' || text === 'false')) return text === 'true';
  return text;
}
