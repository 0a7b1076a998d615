// What kube-apiserver does with a custom resource's body before storing it:
// prune the fields its CRD's structural schema does not declare (unless
// x-kubernetes-preserve-unknown-fields), apply `default`s, then validate it
// against the openAPIV3Schema; a failure is a 422 Invalid naming the fields.
// Without this, a YAML example could pass through the fake with a field its
// CRD silently drops on a real cluster. Validation uses ajv (draft-07 is close
// enough to the OpenAPI 3.0 subset CRDs allow); x-kubernetes-int-or-string is
// checked as the real server checks it.
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';

type Schema = Record<string, unknown>;

export interface CustomResourceSchema {
  /** Prunes and defaults in place (the object as the real server would store it). */
  normalize(obj: Record<string, unknown>): void;
  /** Field errors, empty when valid: `spec.ingress[0].toPorts: Invalid value: …`. */
  validate(obj: Record<string, unknown>): string[];
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function pruneAndDefault(value: unknown, schema: Schema | undefined, root: boolean): void {
  if (schema === undefined) return;
  if (Array.isArray(value)) {
    const items = schema.items as Schema | undefined;
    for (const v of value) pruneAndDefault(v, items, false);
    return;
  }
  if (!isObject(value)) return;
  const props = isObject(schema.properties) ? (schema.properties as Record<string, Schema>) : undefined;
  const additional = isObject(schema.additionalProperties) ? (schema.additionalProperties as Schema) : undefined;
  const preserve = schema['x-kubernetes-preserve-unknown-fields'] === true || schema.additionalProperties === true;
  for (const key of Object.keys(value)) {
    // apiVersion, kind and metadata are the server's, whatever the schema says of them.
    if (root && (key === 'apiVersion' || key === 'kind' || key === 'metadata')) continue;
    const sub = props?.[key] ?? additional;
    if (sub === undefined && !preserve) delete value[key];
    else pruneAndDefault(value[key], sub, false);
  }
  if (props !== undefined) {
    for (const [key, sub] of Object.entries(props)) {
      if (!(key in value) && sub.default !== undefined) value[key] = structuredClone(sub.default);
    }
  }
}

function fieldPath(instancePath: string): string {
  return instancePath
    .split('/')
    .slice(1)
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((acc, p) => (/^\d+$/.test(p) ? `${acc}[${p}]` : acc === '' ? p : `${acc}.${p}`), '');
}

function describe(e: ErrorObject): string {
  const where = fieldPath(e.instancePath) || '<root>';
  if (e.keyword === 'required') return `${where === '<root>' ? '' : `${where}.`}${(e.params as { missingProperty: string }).missingProperty}: Required value`;
  if (e.keyword === 'enum') {
    const allowed = (e.params as { allowedValues: unknown[] }).allowedValues.map((v) => JSON.stringify(v)).join(', ');
    return `${where}: Unsupported value: supported values: ${allowed}`;
  }
  if (e.keyword === 'x-kubernetes-int-or-string') return `${where}: Invalid value: must be an integer or a string`;
  if (e.keyword === 'type') return `${where}: Invalid value: must be of type ${(e.params as { type: string }).type}`;
  return `${where}: Invalid value: ${e.message ?? e.keyword}`;
}

function newAjv(): Ajv {
  const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
  ajv.addKeyword({
    keyword: 'x-kubernetes-int-or-string',
    schemaType: 'boolean',
    validate: (on: boolean, data: unknown) => !on || typeof data === 'string' || Number.isInteger(data),
    errors: false,
  });
  return ajv;
}

/** The schema of each served version of a CRD (versions without a schema accept anything). */
export function crdSchemas(crd: Record<string, unknown>): Map<string, CustomResourceSchema> {
  const out = new Map<string, CustomResourceSchema>();
  const spec = isObject(crd.spec) ? crd.spec : {};
  const versions = Array.isArray(spec.versions) ? (spec.versions as Array<Record<string, unknown>>) : [];
  const ajv = newAjv();
  for (const v of versions) {
    const schema = isObject(v.schema) && isObject(v.schema.openAPIV3Schema) ? (v.schema.openAPIV3Schema as Schema) : undefined;
    if (schema === undefined) continue;
    let check: ValidateFunction | undefined;
    try {
      check = ajv.compile(schema);
    } catch {
      // A schema ajv cannot compile still prunes; only its validation is skipped.
      check = undefined;
    }
    out.set(String(v.name), {
      normalize: (obj) => pruneAndDefault(obj, schema, true),
      validate: (obj) => {
        if (check === undefined || check(obj)) return [];
        return (check.errors ?? []).map(describe);
      },
    });
  }
  return out;
}
