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

/**
 * Each route's validator is compiled on the route's first request: compiling
 * all of them took a fifth of a second of every agent's start, and most
 * routes are never called in an agent's life. (A schema ajv refuses is
 * found by the tests that send each route a request.)
 */
export function requestValidatorCompiler(): FastifySchemaCompiler<unknown> {
  const body = newAjv({ coerce: false });
  const query = newAjv({ coerce: true });
  return ({ schema, httpPart }) => {
    let compiled: ValidateFunction | undefined;
    const validate = ((data: unknown) => {
      compiled ??= (httpPart === 'body' ? body : query).compile(schema as object);
      const ok = compiled(data);
      // fastify reads the errors off the function it was given.
      validate.errors = compiled.errors;
      return ok;
    }) as ValidateFunction;
    return validate;
  };
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
