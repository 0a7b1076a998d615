import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import type { FastifySchemaCompiler } from 'fastify';

/**
 * The validators requests are checked with: the document is OpenAPI 3.1, so
 * JSON Schema 2020-12, in ajv's strict mode (a keyword ajv does not know is
 * an error, not a silent no-op). Bodies are checked as sent: unlike fastify's
 * default, nothing is coerced or stripped, so `additionalProperties: false`
 * refuses a field the document does not name. Query strings carry text only,
 * so their values are coerced to the schema's types (`all=true` → true).
 */
export function newAjv(opts: { coerce: boolean }): Ajv2020 {
  return new Ajv2020({ strict: true, allErrors: false, coerceTypes: opts.coerce ? 'array' : false, useDefaults: false, removeAdditional: false });
}

export function requestValidatorCompiler(): FastifySchemaCompiler<unknown> {
  const body = newAjv({ coerce: false });
  const query = newAjv({ coerce: true });
  return ({ schema, httpPart }) => (httpPart === 'body' ? body : query).compile(schema as object) as ValidateFunction;
}

/** ajv's errors as one line: `/state must be equal to one of the allowed values (…)`. */
export function describeErrors(errors: ErrorObject[] | null | undefined): string {
  return (errors ?? [])
    .map((e) => {
      const where = e.instancePath || '(root)';
      const allowed = e.keyword === 'enum' ? ` (${JSON.stringify((e.params as { allowedValues: unknown[] }).allowedValues)})` : '';
      const extra = e.keyword === 'additionalProperties' ? ` "${(e.params as { additionalProperty: string }).additionalProperty}"` : '';
      return `${where} ${e.message ?? e.keyword}${extra}${allowed}`;
    })
    .join('; ');
}
