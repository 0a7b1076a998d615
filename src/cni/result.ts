import { z } from 'zod';
import { CniError, CniErrorCode } from './errors.js';
import { resultFamily } from './convert.js';
import { type AnyResult, Result020Schema, Result040Schema, Result100Schema } from './types.js';

export * from './convert.js';

const SCHEMA_OF = { '020': Result020Schema, '040': Result040Schema, '100': Result100Schema } as const;

/** Validates a decoded result of the given version. */
export function parseResult(version: string, value: unknown): AnyResult {
  const family = resultFamily(version);
  const parsed = SCHEMA_OF[family].safeParse(value);
  if (!parsed.success) {
    throw new CniError(
      CniErrorCode.DecodingFailure,
      `invalid ${version} result`,
      z.prettifyError(parsed.error).replace(/\n/g, '; '),
    );
  }
  return { ...parsed.data, cniVersion: version };
}

/** Decodes result bytes, trusting their cniVersion (missing means `fallbackVersion`). */
export function decodeResult(bytes: string, fallbackVersion: string): AnyResult {
  let value: unknown;
  try {
    value = JSON.parse(bytes);
  } catch (err) {
    throw new CniError(CniErrorCode.DecodingFailure, `failed to decode result: ${(err as Error).message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new CniError(CniErrorCode.DecodingFailure, 'failed to decode result: not a JSON object');
  }
  const claimed = (value as Record<string, unknown>).cniVersion;
  const version = typeof claimed === 'string' && claimed !== '' ? claimed : fallbackVersion;
  return parseResult(version, { ...value, cniVersion: version });
}

