/**
 * The request body limit an operation's schema implies: the byte length of
 * the longest JSON text the schema admits, written compactly (no whitespace
 * between tokens, no repeated keys, numbers as JSON.stringify writes them)
 * but with every character of every string in its longest escape. maxLength
 * counts code points, and one code point can be written as a surrogate pair
 * of \uXXXX escapes: 12 bytes. So the limit refuses nothing a schema-valid
 * client could send, and the schema alone decides how much the agent reads.
 */

type Schema = Record<string, unknown>;

/** Bytes of one code point written as \uXXXX escapes. */
const ESCAPED_CODE_POINT = 12;
/** The longest text JSON.stringify gives a finite number: -1.7976931348623157e+308. */
const LONGEST_NUMBER = 24;

export class UnboundedSchemaError extends Error {
  constructor(where: string, why: string) {
    super(`schema at ${where} admits bodies of any length: ${why}`);
    this.name = 'UnboundedSchemaError';
  }
}

/** Bytes of a string's JSON text with each character escaped (\uXXXX, a pair for astral ones). */
export function escapedStringBytes(s: string): number {
  let n = 2;
  for (const ch of s) n += ch.codePointAt(0)! > 0xffff ? 12 : 6;
  return n;
}

function escapedValueBytes(v: unknown): number {
  return typeof v === 'string' ? escapedStringBytes(v) : JSON.stringify(v).length;
}

function numberBytes(schema: Schema): number {
  const { minimum, maximum } = schema;
  if (schema.type === 'integer' && typeof minimum === 'number' && typeof maximum === 'number') {
    return Math.max(String(minimum).length, String(maximum).length);
  }
  return LONGEST_NUMBER;
}

function typeBytes(schema: Schema, type: string, where: string): number {
  switch (type) {
    case 'string': {
      if (typeof schema.maxLength !== 'number') throw new UnboundedSchemaError(where, 'a string without maxLength');
      return 2 + ESCAPED_CODE_POINT * schema.maxLength;
    }
    case 'integer':
    case 'number':
      return numberBytes(schema);
    case 'boolean':
      return 5;
    case 'null':
      return 4;
    case 'array': {
      if (typeof schema.maxItems !== 'number') throw new UnboundedSchemaError(where, 'an array without maxItems');
      if (schema.maxItems === 0) return 2;
      const item = longestJsonBytes((schema.items ?? {}) as Schema, `${where}/items`);
      return 2 + schema.maxItems * item + (schema.maxItems - 1);
    }
    case 'object': {
      if (schema.additionalProperties !== false || schema.patternProperties !== undefined) {
        throw new UnboundedSchemaError(where, 'an object that allows properties it does not name');
      }
      const props = Object.entries((schema.properties ?? {}) as Record<string, Schema>);
      if (props.length === 0) return 2;
      const members = props.map(([k, s]) => escapedStringBytes(k) + 1 + longestJsonBytes(s, `${where}/properties/${k}`));
      return 2 + members.reduce((a, b) => a + b, 0) + (props.length - 1);
    }
    default:
      throw new UnboundedSchemaError(where, `type ${type}`);
  }
}

/** Bytes of the longest JSON text `schema` (with its $refs already inlined) admits; throws when there is no bound. */
export function longestJsonBytes(schema: Schema, where = '#'): number {
  if (Array.isArray(schema.enum)) return Math.max(...schema.enum.map(escapedValueBytes));
  if ('const' in schema) return escapedValueBytes(schema.const);
  const branches = (schema.anyOf ?? schema.oneOf) as Schema[] | undefined;
  if (branches) return Math.max(...branches.map((b, i) => longestJsonBytes(b, `${where}/${schema.anyOf ? 'anyOf' : 'oneOf'}/${i}`)));
  const types = Array.isArray(schema.type) ? (schema.type as string[]) : typeof schema.type === 'string' ? [schema.type] : [];
  if (types.length === 0) throw new UnboundedSchemaError(where, 'no type');
  return Math.max(...types.map((t) => typeBytes(schema, t, where)));
}
