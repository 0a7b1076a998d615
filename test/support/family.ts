/**
 * The address family an end-to-end suite runs on, in one place: IPv4 only,
 * IPv6 only, or dual-stack pods. A suite is written once against IPv4
 * "template" addresses (the numbers its policy tables were always written
 * with) and this module gives each family's version of them, so the IPv6
 * run has the same scene, the same rules and the same expected verdicts.
 *
 * The IPv6 mirror of an IPv4 address keeps its last octet and moves the
 * first three into the network part: a.b.c.d/L (L ≥ 24) becomes
 * fd74:a:b:c::d/(L+96), read as hex groups. A /24 is a /120 and the
 * except-half /25 a /121, so every rule and every outside address lies in
 * the same place of its prefix on both families; the /0s are kept apart
 * (0.0.0.0/0 and ::/0, never one for both: Cilium once let 0.0.0.0/0 admit
 * IPv6 sources).
 */
import { cidrLabel, formatLabel } from '../../src/labels/index.js';
import { formatIp, formatPrefix, type IpFamily, ipFamilyOf, parseIp, parsePrefix } from '../../src/netip/index.js';

export type { IpFamily } from '../../src/netip/index.js';

/** What a suite runs on: pods with an IPv4 address, an IPv6 address, or one of each. */
export type Family = 4 | 6 | 'dual';

/** How a suite names its family in test titles and namespace tags. */
export function familyName(f: Family): 'ipv4' | 'ipv6' | 'dual' {
  return f === 4 ? 'ipv4' : f === 6 ? 'ipv6' : 'dual';
}

/** The IP versions a family's pods carry, and that its probes run on: IPv4 first. */
export function versionsOf(f: Family): IpFamily[] {
  return f === 'dual' ? [4, 6] : [f];
}

/** The /96 that holds every IPv6 mirror of an IPv4 /24 used by the tests (a ULA, never routed off the machine). */
const MIRROR_TOP = 'fd74';

function octets(v4: string): number[] {
  const parts = v4.split('.').map((p) => Number(p));
  if (parts.length !== 4 || parts.some((n) => !Number.isInteger(n) || n < 0 || n > 255)) throw new Error(`not an IPv4 address: ${v4}`);
  return parts;
}

/** The IPv6 address standing for an IPv4 template address (canonical text: what the agent prints). */
export function mirrorIp(v4: string): string {
  const [a, b, c, d] = octets(v4);
  return formatIp(parseIp(`${MIRROR_TOP}:${a}:${b}:${c}::${d!.toString(16)}`));
}

/** The IPv6 prefix standing for an IPv4 template prefix: /L → /(L+96); /0 → ::/0. Prefixes between /1 and /23 have no mirror here. */
export function mirrorPrefix(v4Cidr: string): string {
  const [addr, len] = splitCidr(v4Cidr);
  if (len === 0) return '::/0';
  if (len < 24) throw new Error(`${v4Cidr}: the IPv6 mirror only keeps prefixes of /24 and longer`);
  return formatPrefix(parsePrefix(`${mirrorIp(addr)}/${len + 96}`));
}

function splitCidr(cidr: string): [string, number] {
  const slash = cidr.indexOf('/');
  if (slash < 0) throw new Error(`not a CIDR: ${cidr}`);
  return [cidr.slice(0, slash), Number(cidr.slice(slash + 1))];
}

/** An IPv4 template address in IP version `v`. */
export function ipIn(v: IpFamily, v4: string): string {
  return v === 4 ? v4 : mirrorIp(v4);
}

/** An IPv4 template prefix in IP version `v`. */
export function cidrIn(v: IpFamily, v4Cidr: string): string {
  return v === 4 ? v4Cidr : mirrorPrefix(v4Cidr);
}

/** A host route's prefix: /32 or /128. */
export function hostCidr(address: string): string {
  return `${address}/${versionOf(address) === 4 ? 32 : 128}`;
}

/** A CIDR identity's label as the agent spells it: `cidr:10.0.0.0/24`, `cidr:fd74-10-199--0/120` (no ':' in a label key). */
export function cidrLabelOf(cidr: string): string {
  return formatLabel(cidrLabel(parsePrefix(cidr)));
}

/** "Everything" in one IP version only: 0.0.0.0/0 or ::/0. */
export function allOf(v: IpFamily): string {
  return v === 4 ? '0.0.0.0/0' : '::/0';
}

/** The IP version of an address's text; throws on anything else. */
export function versionOf(address: string): IpFamily {
  const f = ipFamilyOf(address);
  if (f === 0) throw new Error(`not an IP address: ${address}`);
  return f;
}

/** `address:port` as sockets, URLs and `--frontend` take it: `10.0.0.1:80`, `[fd74::1]:80`. */
export function hostPort(address: string, port: number): string {
  return versionOf(address) === 6 ? `[${address}]:${port}` : `${address}:${port}`;
}

/** A family's pod CIDRs for one IPv4 template pod CIDR (a /24): IPv4 first, as `--pod-cidr` flags take them. */
export function podCidrsOf(f: Family, v4Cidr: string): string[] {
  return versionsOf(f).map((v) => cidrIn(v, v4Cidr));
}

/** The `--pod-cidr` flags of a family: one per pod CIDR. */
export function podCidrArgs(cidrs: readonly string[]): string[] {
  return cidrs.flatMap((c) => ['--pod-cidr', c]);
}

/** Something that has an address per IP version (a pod, the node's router, an outside host). */
export type Addresses = Partial<Record<IpFamily, string>>;

/** The address of `v` an addressed thing has; throws naming it when it has none (a single-stack pod probed on the other family). */
export function addressIn(what: string, addresses: Addresses, v: IpFamily): string {
  const a = addresses[v];
  if (a === undefined) throw new Error(`${what} has no IPv${v} address (it has ${JSON.stringify(addresses)})`);
  return a;
}

/** Sorts CNI result addresses (`10.0.0.5/24`, `fd74::5/120`) by IP version. */
export function addressesByVersion(cidrs: readonly string[]): Addresses {
  const out: Addresses = {};
  for (const c of cidrs) {
    const [addr] = splitCidr(c.includes('/') ? c : `${c}/0`);
    const v = versionOf(addr);
    if (out[v] === undefined) out[v] = addr;
  }
  return out;
}
