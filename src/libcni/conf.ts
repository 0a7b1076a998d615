import { readdir, readFile } from 'node:fs/promises';
import { extname, join } from 'node:path';
import { CniError, CniErrorCode, highestSupported, type NetConf, parseNetConf } from '../cni/index.js';

/** One plugin's config: the parsed view plus the original bytes, which are what gets sent. */
export interface NetworkConfig {
  network: NetConf;
  /** The original JSON object; unknown fields survive injection untouched. */
  raw: Record<string, unknown>;
}

export interface NetworkConfigList {
  name: string;
  cniVersion: string;
  disableCheck: boolean;
  disableGC: boolean;
  plugins: NetworkConfig[];
  /** The list as loaded (a single conf is wrapped); cached with every attachment. */
  raw: Record<string, unknown>;
}

function configError(msg: string, details = ''): CniError {
  return new CniError(CniErrorCode.InvalidNetworkConfig, msg, details);
}

function decodeObject(bytes: string, what: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(bytes);
  } catch (err) {
    throw new CniError(CniErrorCode.DecodingFailure, `error parsing ${what}: ${(err as Error).message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new CniError(CniErrorCode.DecodingFailure, `error parsing ${what}: not a JSON object`);
  }
  return value as Record<string, unknown>;
}

/** A single plugin config from an object (libcni ConfFromBytes). */
export function confFromObject(raw: Record<string, unknown>): NetworkConfig {
  if (raw.type === undefined || raw.type === '') throw configError("error parsing configuration: missing 'type'");
  try {
    return { network: parseNetConf(raw), raw };
  } catch (err) {
    throw configError('error parsing configuration', err instanceof CniError ? err.details || err.msg : String(err));
  }
}

export function confFromBytes(bytes: string): NetworkConfig {
  return confFromObject(decodeObject(bytes, 'configuration'));
}

function boolField(raw: Record<string, unknown>, key: string): boolean {
  const v = raw[key];
  if (v === undefined) return false;
  if (typeof v === 'boolean') return v;
  // libcni also accepts the strings Go's ParseBool knows.
  if (typeof v === 'string') {
    if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(v)) return true;
    if (['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(v)) return false;
  }
  throw configError(`error parsing configuration list: invalid ${key} value ${JSON.stringify(v)}`);
}

/** A conflist from an object (libcni ConfListFromBytes), including `cniVersions` negotiation. */
export function confListFromObject(raw: Record<string, unknown>): NetworkConfigList {
  const name = raw.name;
  if (name === undefined) throw configError('error parsing configuration list: no name');
  if (typeof name !== 'string') throw configError(`error parsing configuration list: invalid name type ${typeof name}`);
  let cniVersion = '';
  if (raw.cniVersion !== undefined) {
    if (typeof raw.cniVersion !== 'string') {
      throw configError(`error parsing configuration list: invalid cniVersion type ${typeof raw.cniVersion}`);
    }
    cniVersion = raw.cniVersion;
  }
  if (raw.cniVersions !== undefined) {
    if (!Array.isArray(raw.cniVersions) || raw.cniVersions.some((v) => typeof v !== 'string')) {
      throw configError('error parsing configuration list: cniVersions must be an array of strings');
    }
    const best = highestSupported(raw.cniVersions as string[]);
    if (best !== undefined) cniVersion = best;
  }
  const disableCheck = boolField(raw, 'disableCheck');
  const disableGC = boolField(raw, 'disableGC');
  const plugins = raw.plugins;
  if (plugins === undefined) throw configError("error parsing configuration list: no 'plugins' key");
  if (!Array.isArray(plugins)) throw configError("error parsing configuration list: 'plugins' must be an array");
  if (plugins.length === 0) throw configError('error parsing configuration list: no plugins in list');
  const parsedPlugins = plugins.map((p, i) => {
    if (p === null || typeof p !== 'object' || Array.isArray(p)) {
      throw configError(`error parsing configuration list: plugin ${i} is not an object`);
    }
    try {
      return confFromObject(p as Record<string, unknown>);
    } catch (err) {
      throw configError(`failed to parse plugin ${i} of configuration list "${name}"`, (err as Error).message);
    }
  });
  return { name, cniVersion, disableCheck, disableGC, plugins: parsedPlugins, raw };
}

export function confListFromBytes(bytes: string): NetworkConfigList {
  return confListFromObject(decodeObject(bytes, 'configuration list'));
}

/** Wraps a single conf into a one-plugin list (libcni ConfListFromConf). */
export function confListFromConf(conf: NetworkConfig): NetworkConfigList {
  const raw = { cniVersion: conf.network.cniVersion ?? '', name: conf.network.name ?? '', plugins: [conf.raw] };
  return confListFromObject(raw);
}

/** Returns a copy of the plugin config with top-level keys set; every other field is kept. */
export function injectConf(conf: NetworkConfig, inject: Record<string, unknown>): NetworkConfig {
  const raw: Record<string, unknown> = { ...conf.raw };
  for (const [k, v] of Object.entries(inject)) {
    if (k === '') throw configError('keys to inject must not be empty');
    if (v === undefined) throw configError(`value to inject for "${k}" must not be undefined`);
    raw[k] = v;
  }
  return confFromObject(raw);
}

// ---- config directories ---------------------------------------------------------

export const SINGLE_CONF_EXTENSIONS = ['.conf', '.json'] as const;
export const LIST_CONF_EXTENSIONS = ['.conflist'] as const;

export interface LoadedConfig {
  file: string;
  list: NetworkConfigList;
}
export interface InvalidConfig {
  file: string;
  error: CniError;
}
export interface ConfigDirContents {
  configs: LoadedConfig[];
  invalid: InvalidConfig[];
}

/**
 * Every network config in a directory, sorted by file name as runtimes pick
 * them (first wins). A broken file is reported beside the good ones.
 */
export async function loadConfigDir(dir: string): Promise<ConfigDirContents> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { configs: [], invalid: [] };
    throw new CniError(CniErrorCode.IOFailure, `reading config dir ${dir}`, (err as Error).message);
  }
  const out: ConfigDirContents = { configs: [], invalid: [] };
  for (const name of names.sort()) {
    const ext = extname(name);
    const isList = (LIST_CONF_EXTENSIONS as readonly string[]).includes(ext);
    const isSingle = (SINGLE_CONF_EXTENSIONS as readonly string[]).includes(ext);
    if (!isList && !isSingle) continue;
    const file = join(dir, name);
    try {
      const bytes = await readFile(file, 'utf8');
      const list = isList ? confListFromBytes(bytes) : confListFromConf(confFromBytes(bytes));
      out.configs.push({ file, list });
    } catch (err) {
      const e = err instanceof CniError ? err : new CniError(CniErrorCode.IOFailure, `reading ${file}`, (err as Error).message);
      out.invalid.push({ file, error: e });
    }
  }
  return out;
}

/** The list named `name`; conflists are preferred over single confs, as in libcni's LoadConfList. */
export async function loadConfList(dir: string, name: string): Promise<NetworkConfigList> {
  const { configs } = await loadConfigDir(dir);
  const isList = (c: LoadedConfig) => c.file.endsWith('.conflist');
  const match = configs.find((c) => isList(c) && c.list.name === name) ?? configs.find((c) => !isList(c) && c.list.name === name);
  if (!match) throw configError(`no net configuration with name "${name}" in ${dir}`);
  return match.list;
}
