/**
 * How one imported policy is kept in the kvstore: one key per policy
 * (`<prefix><kind>/<namespace>/<name>`, namespace and name percent-encoded so
 * a `/` in a name cannot make two policies share a key; '' for cluster-wide),
 * and a value holding the document exactly as it was imported (after
 * YAML/JSON parsing, what the parser re-reads into the same Policy) with a
 * hash of it. The hash lets a node recognise the echo of its own write, or a
 * change that brings nothing new, without re-parsing.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { PolicyName } from '../rule.js';

/** The value's layout version, so a later format can be told apart. */
const FORMAT = 1;

/** The value as any node (or an older version) may have written it: checked on every read. */
const StoredValueSchema = z.object({
  v: z.literal(FORMAT, { error: 'unknown format' }),
  hash: z.string(),
  // JSON has no undefined: a value without a document lacks the key.
  document: z.unknown().refine((d) => d !== undefined, { error: 'is missing' }),
});

export interface StoredPolicy {
  readonly hash: string;
  readonly document: unknown;
}

export function policyKeySuffix(name: PolicyName): string {
  return `${name.kind}/${encodeURIComponent(name.namespace)}/${encodeURIComponent(name.name)}`;
}

/** Encodes a document; the hash covers the document's JSON text, which is what the value carries. */
export function encodeStoredPolicy(document: unknown): { value: string; hash: string } {
  const text = JSON.stringify(document);
  const hash = createHash('sha256').update(text).digest('hex');
  return { value: `{"v":${FORMAT},"hash":"${hash}","document":${text}}`, hash };
}

/** The stored value, or a sentence saying why it is unusable. */
export function decodeStoredPolicy(value: string): StoredPolicy | string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    return 'not JSON';
  }
  const shape = StoredValueSchema.safeParse(parsed, { reportInput: true });
  if (!shape.success) return shape.error.issues.map((i) => `${i.path.join('.') || 'value'} ${JSON.stringify(i.input)}: ${i.message}`).join('; ');
  const { hash, document } = shape.data;
  // A damaged value must not be enforced as if it were the policy someone imported.
  if (encodeStoredPolicy(document).hash !== hash) return 'the document does not match its hash';
  return { hash, document };
}
