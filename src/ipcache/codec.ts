import { z } from 'zod';
import { familyBits, formatIp, tryParseIp, tryParsePrefix, type IpPrefix } from '../netip/index.js';
import { isGlobalIdentityNumber, ReservedIdentity } from '../identity/index.js';

/**
 * The kvstore form of an ipcache entry (`tendril/state/ip/v1/<ip>`): the key
 * is the bare address for a host entry (as in Cilium) and `addr/len` for a
 * CIDR; the value is JSON naming the identity, the hosting node's IP (the
 * tunnel endpoint), its IPv6 one beside an IPv4 node IP (the endpoint a node
 * with an IPv6 node IP alone reaches it at), and the writer, which a
 * conditional delete compares.
 */
export interface KvIpcacheValue {
  identity: number;
  hostIP: string;
  /** The hosting node's IPv6 InternalIP when hostIP is its IPv4 one (absent in values of older agents). */
  hostIP6?: string;
  /** The node that wrote the entry. */
  node: string;
  /** The owner within that node (e.g. `endpoint:1234`). */
  owner: string;
}

export function prefixKeySuffix(p: IpPrefix): string {
  const addr = formatIp(p);
  return p.length === familyBits(p.family) ? addr : `${addr}/${p.length}`;
}

export function parseKeySuffix(suffix: string): IpPrefix | undefined {
  return tryParsePrefix(suffix, { bareAddress: true });
}

export function encodeValue(v: KvIpcacheValue): string {
  return JSON.stringify({ identity: v.identity, hostIP: v.hostIP, ...(v.hostIP6 === undefined ? {} : { hostIP6: v.hostIP6 }), node: v.node, owner: v.owner });
}

/** The value as any node may have written it: outside input, checked on every read. */
const KvIpcacheValueSchema = z.object({
  // Only identities that mean the same on every node may cross nodes; a
  // node-local number published by mistake would alias another node's CIDR.
  identity: z.number().refine((id) => isGlobalIdentityNumber(id) || (Number.isInteger(id) && id >= 0 && id <= ReservedIdentity.WorldIpv6), { error: 'is not a cluster-wide identity' }),
  hostIP: z.string().refine((ip) => tryParseIp(ip) !== undefined, { error: 'is not an IP' }),
  hostIP6: z.string().refine((ip) => tryParseIp(ip)?.family === 6, { error: 'is not an IPv6 address' }).optional(),
  node: z.string().min(1, { error: 'is missing' }),
  owner: z.string().min(1, { error: 'is missing' }),
});

/** Decodes a value written by any node; returns a reason string when it is unusable. */
export function decodeValue(text: string): KvIpcacheValue | string {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return 'value is not JSON';
  }
  const parsed = KvIpcacheValueSchema.safeParse(raw, { reportInput: true });
  if (!parsed.success) return parsed.error.issues.map((i) => `${i.path.join('.') || 'value'} ${JSON.stringify(i.input)}: ${i.message}`).join('; ');
  return parsed.data;
}
