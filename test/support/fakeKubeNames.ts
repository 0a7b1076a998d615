// metadata.generateName as kube-apiserver expands it: the prefix (cut to 58
// characters so the name stays within 63) and 5 random characters from the
// alphabet of k8s.io/apimachinery's rand.String, which leaves out vowels and
// the look-alikes 0, 1 and 3 so that no word forms. A generated name that is
// taken is drawn again: since Kubernetes 1.30 (RetryGenerateName, GA in 1.32,
// the version the fake announces) the server makes up to 8 attempts before it
// answers 409 AlreadyExists; a `name` given with generateName wins.
import { randomInt } from 'node:crypto';

export const NAME_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';
const SUFFIX_LENGTH = 5;
const MAX_GENERATED_PREFIX = 63 - SUFFIX_LENGTH;
/** Attempts at a free generated name before the create fails (apiserver's maxNameGenerationCreateAttempts). */
export const GENERATE_NAME_ATTEMPTS = 8;

/** Where the random part comes from (a test may replace it to force collisions). */
export type NameSuffixSource = () => string;

export function randomNameSuffix(): string {
  let s = '';
  for (let i = 0; i < SUFFIX_LENGTH; i++) s += NAME_ALPHABET[randomInt(NAME_ALPHABET.length)];
  return s;
}

export function generatedName(prefix: string, suffix: string): string {
  return `${prefix.slice(0, MAX_GENERATED_PREFIX)}${suffix}`;
}
