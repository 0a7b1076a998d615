import { CniError, CniErrorCode } from './errors.js';
import { validateNetworkName } from './names.js';
import type { Dns, GcAttachment } from './types.js';

/**
 * One plugin's network configuration. Unknown fields are kept: plugins define
 * their own, and libcni passes every byte it does not understand through.
 */
export interface NetConf {
  cniVersion?: string;
  name?: string;
  type: string;
  capabilities?: Record<string, boolean>;
  ipam?: { type?: string; [k: string]: unknown };
  dns?: Dns;
  args?: Record<string, unknown>;
  prevResult?: Record<string, unknown>;
  runtimeConfig?: Record<string, unknown>;
  [k: string]: unknown;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

function bad(field: string, expected: string): never {
  throw new CniError(CniErrorCode.InvalidNetworkConfig, 'invalid network config', `${field}: expected ${expected}`);
}

/**
 * Checks the fields the spec defines and keeps the rest: every unknown field
 * must reach the plugins chained after this one, exactly as given.
 */
export function parseNetConf(value: unknown): NetConf {
  if (!isObject(value)) throw new CniError(CniErrorCode.DecodingFailure, 'network config is not a JSON object');
  const v = value;
  if (v.type === undefined || v.type === '') throw new CniError(CniErrorCode.InvalidNetworkConfig, 'missing network type');
  if (typeof v.type !== 'string') bad('type', 'a string');
  for (const f of ['cniVersion', 'name'] as const) if (v[f] !== undefined && typeof v[f] !== 'string') bad(f, 'a string');
  if (v.capabilities !== undefined) {
    if (!isObject(v.capabilities)) bad('capabilities', 'an object');
    for (const [k, c] of Object.entries(v.capabilities)) if (typeof c !== 'boolean') bad(`capabilities.${k}`, 'a boolean');
  }
  if (v.ipam !== undefined) {
    if (!isObject(v.ipam)) bad('ipam', 'an object');
    if (v.ipam.type !== undefined && typeof v.ipam.type !== 'string') bad('ipam.type', 'a string');
  }
  if (v.dns !== undefined) {
    if (!isObject(v.dns)) bad('dns', 'an object');
    for (const f of ['nameservers', 'search', 'options'] as const) {
      const list = v.dns[f];
      if (list !== undefined && (!Array.isArray(list) || list.some((x) => typeof x !== 'string'))) bad(`dns.${f}`, 'a list of strings');
    }
    if (v.dns.domain !== undefined && typeof v.dns.domain !== 'string') bad('dns.domain', 'a string');
  }
  for (const f of ['args', 'prevResult', 'runtimeConfig'] as const) if (v[f] !== undefined && !isObject(v[f])) bad(f, 'an object');
  return v as NetConf;
}

/**
 * The network name of a plugin's netconf, which every verb but VERSION needs:
 * missing, empty or with characters outside libcni's set (`a/b`) is code 7,
 * as Go's skel answers. Not part of parseNetConf: a conflist's plugin entries
 * get their name from the list.
 */
export function requireNetworkName(conf: NetConf): string {
  const name = conf.name ?? '';
  validateNetworkName(name);
  return name;
}

/**
 * The attachments a GC call says are still in use (`cni.dev/valid-attachments`,
 * or the key's earlier spelling `cni.dev/attachments`); none given means none.
 */
export function validAttachments(conf: Readonly<Record<string, unknown>>): GcAttachment[] {
  const raw = conf['cni.dev/valid-attachments'] ?? conf['cni.dev/attachments'];
  if (raw === undefined) return [];
  const ok =
    Array.isArray(raw) &&
    raw.every((a) => isObject(a) && typeof a.containerID === 'string' && typeof a.ifname === 'string');
  if (!ok) throw new CniError(CniErrorCode.InvalidNetworkConfig, 'invalid cni.dev/valid-attachments: expected a list of {containerID, ifname}');
  return (raw as GcAttachment[]).map((a) => ({ containerID: a.containerID, ifname: a.ifname }));
}
