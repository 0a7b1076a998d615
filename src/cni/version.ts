import { CniError, CniErrorCode } from './errors.js';

/** Every CNI specification version tendril speaks, oldest first. */
export const SPEC_VERSIONS = ['0.1.0', '0.2.0', '0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] as const;
export type SpecVersion = (typeof SPEC_VERSIONS)[number];

/** The newest version: everything is normalised to it internally. */
export const CURRENT_VERSION: SpecVersion = '1.1.0';

/** A config without cniVersion is, by the spec's history, 0.1.0. */
export const IMPLICIT_VERSION: SpecVersion = '0.1.0';

export function isSpecVersion(v: unknown): v is SpecVersion {
  return typeof v === 'string' && (SPEC_VERSIONS as readonly string[]).includes(v);
}

interface ParsedVersion {
  major: number;
  minor: number;
  micro: number;
}

/** Parses "x", "x.y" or "x.y.z" as libcni does; anything else is a decoding error. */
export function parseVersion(v: string): ParsedVersion {
  const m = /^(\d+)(?:\.(\d+))?(?:\.(\d+))?$/.exec(v);
  if (!m) {
    throw new CniError(CniErrorCode.DecodingFailure, `invalid version "${v}"`);
  }
  return { major: Number(m[1]), minor: Number(m[2] ?? 0), micro: Number(m[3] ?? 0) };
}

/** Orders two version strings: negative if a < b, 0 if equal, positive if a > b. */
export function compareVersions(a: string, b: string): number {
  const pa = parseVersion(a);
  const pb = parseVersion(b);
  return pa.major - pb.major || pa.minor - pb.minor || pa.micro - pb.micro;
}

export function versionAtLeast(v: string, min: string): boolean {
  return compareVersions(v, min) >= 0;
}

/** What a plugin answers to VERSION. */
export interface PluginVersionInfo {
  cniVersion: string;
  supportedVersions: string[];
}

export function pluginVersionInfo(supported: readonly string[] = SPEC_VERSIONS): PluginVersionInfo {
  return { cniVersion: CURRENT_VERSION, supportedVersions: [...supported] };
}

/**
 * The version a config (or result) claims, read without trusting the rest of it.
 * Missing means 0.1.0, as in libcni's ConfigDecoder.
 */
export function decodeVersion(bytes: string): string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(bytes);
  } catch (err) {
    throw new CniError(CniErrorCode.DecodingFailure, `decoding version from network config: ${(err as Error).message}`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new CniError(CniErrorCode.DecodingFailure, 'decoding version from network config: not a JSON object');
  }
  const v = (parsed as Record<string, unknown>).cniVersion;
  if (v === undefined || v === '') return IMPLICIT_VERSION;
  if (typeof v !== 'string') {
    throw new CniError(CniErrorCode.DecodingFailure, `decoding version from network config: cniVersion must be a string`);
  }
  return v;
}

/** Fails with code 1 when the config's version is not one the plugin supports. */
export function reconcileVersion(configVersion: string, info: PluginVersionInfo): void {
  if (!info.supportedVersions.includes(configVersion)) {
    throw new CniError(
      CniErrorCode.IncompatibleVersion,
      'incompatible CNI versions',
      `config is "${configVersion}", plugin supports [${info.supportedVersions.map((v) => `"${v}"`).join(' ')}]`,
    );
  }
}

/** Picks the newest version from a conflist's `cniVersions` that this runtime supports. */
export function highestSupported(candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  for (const c of candidates) {
    if (!isSpecVersion(c)) continue;
    if (best === undefined || compareVersions(c, best) > 0) best = c;
  }
  return best;
}
