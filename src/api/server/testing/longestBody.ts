// The longest body a request schema admits, built value by value, so tests
// can show that the agent's body limit (bodyLimit.ts) takes every body the
// schema allows and nothing longer: each string at its maxLength with every
// code point an astral one written as a \uXXXX surrogate pair escape, each
// key and enum value escaped character by character, arrays at maxItems,
// every property present.

type Schema = Record<string, unknown>;

/** U+1F600 as a JSON escape pair: one code point for maxLength, 12 bytes on the wire. */
const ASTRAL_ESCAPED = '\\ud83d\\ude00';

function escapedString(s: string): string {
  let out = '"';
  for (const ch of s) {
    const cp = ch.codePointAt(0)!;
    if (cp > 0xffff) {
      const v = cp - 0x10000;
      out += `\\u${(0xd800 + (v >> 10)).toString(16).padStart(4, '0')}\\u${(0xdc00 + (v & 0x3ff)).toString(16).padStart(4, '0')}`;
    } else {
      out += `\\u${cp.toString(16).padStart(4, '0')}`;
    }
  }
  return `${out}"`;
}

function escapedValue(v: unknown): string {
  return typeof v === 'string' ? escapedString(v) : JSON.stringify(v);
}

function longest(texts: string[]): string {
  return texts.reduce((a, b) => (b.length > a.length ? b : a));
}

/** The JSON text of the longest body `schema` (references inlined) admits. */
export function longestBody(schema: Schema): string {
  if (Array.isArray(schema.enum)) return longest(schema.enum.map(escapedValue));
  if ('const' in schema) return escapedValue(schema.const);
  const branches = (schema.oneOf ?? schema.anyOf) as Schema[] | undefined;
  if (branches) return longest(branches.map(longestBody));
  const types = [schema.type].flat() as string[];
  return longest(
    types.map((type) => {
      switch (type) {
        case 'string':
          return `"${ASTRAL_ESCAPED.repeat(schema.maxLength as number)}"`;
        case 'integer':
          return longest([String(schema.minimum ?? -Number.MAX_VALUE), String(schema.maximum ?? Number.MAX_VALUE)]);
        case 'number':
          return JSON.stringify(-Number.MAX_VALUE);
        case 'boolean':
          return 'false';
        case 'null':
          return 'null';
        case 'array': {
          const item = longestBody((schema.items ?? {}) as Schema);
          return `[${Array.from({ length: schema.maxItems as number }, () => item).join(',')}]`;
        }
        case 'object': {
          const props = Object.entries((schema.properties ?? {}) as Record<string, Schema>);
          return `{${props.map(([k, s]) => `${escapedString(k)}:${longestBody(s)}`).join(',')}}`;
        }
        default:
          throw new Error(`longestBody: type ${type}`);
      }
    }),
  );
}
