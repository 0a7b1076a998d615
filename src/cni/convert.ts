// Result conversion between spec versions. Free of schema code: converting
// is separate from validating, which only chained calls with a prevResult need.
import { CniError, CniErrorCode } from './errors.js';
import { cidrFamily } from './ip.js';
import type { AnyResult, CurrentResult, Result020, Result040, Result100, Route } from './types.js';
import { CURRENT_VERSION } from './version.js';

/**
 * Results come in three shapes. Versions inside one family convert by relabelling;
 * between families a registered converter reshapes them (libcni's convert.go).
 */
export type ResultFamily = '020' | '040' | '100';

const FAMILY_OF: Record<string, ResultFamily> = {
  '0.1.0': '020',
  '0.2.0': '020',
  '0.3.0': '040',
  '0.3.1': '040',
  '0.4.0': '040',
  '1.0.0': '100',
  '1.1.0': '100',
};

export function resultFamily(version: string): ResultFamily {
  const f = FAMILY_OF[version];
  if (!f) {
    throw new CniError(CniErrorCode.IncompatibleVersion, `unsupported CNI result version "${version}"`);
  }
  return f;
}

type Converter = (from: AnyResult, toVersion: string) => AnyResult;
const converters = new Map<string, Converter>();

/** Registers how results of one family become another family. */
export function registerConverter(from: ResultFamily, to: ResultFamily, fn: Converter): void {
  converters.set(`${from}>${to}`, fn);
}

/** Converts a result to another spec version, as libcni's GetAsVersion does. */
export function convertResult(result: AnyResult, toVersion: string): AnyResult {
  const from = resultFamily(result.cniVersion);
  const to = resultFamily(toVersion);
  if (from === to) return { ...result, cniVersion: toVersion };
  const fn = converters.get(`${from}>${to}`);
  if (!fn) {
    throw new CniError(
      CniErrorCode.IncompatibleVersion,
      `no converter for CNI result version ${result.cniVersion} to ${toVersion}`,
    );
  }
  return fn(result, toVersion);
}

export function toCurrent(result: AnyResult): CurrentResult {
  return convertResult(result, CURRENT_VERSION) as CurrentResult;
}

// ---- the converters ---------------------------------------------------------

function from020To040(r: AnyResult, toVersion: string): Result040 {
  const src = r as Result020;
  const out: Result040 = { cniVersion: toVersion, ips: [], routes: [] };
  for (const [version, cfg] of [
    ['4', src.ip4],
    ['6', src.ip6],
  ] as const) {
    if (!cfg) continue;
    out.ips!.push({ version, address: cfg.ip, ...(cfg.gateway ? { gateway: cfg.gateway } : {}) });
    for (const route of cfg.routes ?? []) out.routes!.push({ ...route });
  }
  if (src.dns) out.dns = { ...src.dns };
  return out;
}

function from040To020(r: AnyResult, toVersion: string): Result020 {
  const src = r as Result040;
  const out: Result020 = { cniVersion: toVersion };
  // 0.2.0 holds one address per family: the first of each wins, as in libcni.
  for (const ip of src.ips ?? []) {
    const cfg = { ip: ip.address, ...(ip.gateway ? { gateway: ip.gateway } : {}) };
    if (ip.version === '4' && !out.ip4) out.ip4 = cfg;
    else if (ip.version === '6' && !out.ip6) out.ip6 = cfg;
  }
  for (const route of src.routes ?? []) {
    const target = cidrFamily(route.dst) === 4 ? out.ip4 : out.ip6;
    if (target) (target.routes ??= []).push({ ...route });
  }
  if (!out.ip4 && !out.ip6) {
    throw new CniError(CniErrorCode.IncompatibleVersion, 'cannot convert: no valid IP addresses', `to version ${toVersion}`);
  }
  if (src.dns) out.dns = { ...src.dns };
  return out;
}

function from040To100(r: AnyResult, toVersion: string): Result100 {
  const src = r as Result040;
  const out: Result100 = { cniVersion: toVersion };
  if (src.interfaces) out.interfaces = src.interfaces.map((i) => ({ ...i }));
  if (src.ips) {
    out.ips = src.ips.map(({ version: _version, ...rest }) => ({ ...rest }));
  }
  if (src.routes) out.routes = src.routes.map((x) => ({ ...x }));
  if (src.dns) out.dns = { ...src.dns };
  return out;
}

function from100To040(r: AnyResult, toVersion: string): Result040 {
  const src = r as Result100;
  const out: Result040 = { cniVersion: toVersion };
  if (src.interfaces) {
    out.interfaces = src.interfaces.map((i) => ({
      name: i.name,
      ...(i.mac !== undefined ? { mac: i.mac } : {}),
      ...(i.sandbox !== undefined ? { sandbox: i.sandbox } : {}),
    }));
  }
  if (src.ips) {
    out.ips = src.ips.map((ip) => ({ version: cidrFamily(ip.address) === 6 ? '6' : '4', ...ip }));
  }
  if (src.routes) out.routes = src.routes.map((x): Route => ({ dst: x.dst, ...(x.gw ? { gw: x.gw } : {}) }));
  if (src.dns) out.dns = { ...src.dns };
  return out;
}

registerConverter('020', '040', from020To040);
registerConverter('040', '020', from040To020);
registerConverter('040', '100', from040To100);
registerConverter('100', '040', from100To040);
registerConverter('020', '100', (r, v) => from040To100(from020To040(r, '0.4.0'), v));
registerConverter('100', '020', (r, v) => from040To020(from100To040(r, '0.4.0'), v));
