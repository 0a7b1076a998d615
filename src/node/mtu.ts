import { TUNNEL_OVERHEAD } from '../datapath/limits.js';
import type { RoutingMode } from '../datapath/types.js';
import { NodeConfigError } from './errors.js';

/** Ethernet's MTU: what an underlay is assumed to carry when it cannot be detected. */
export const DEFAULT_UNDERLAY_MTU = 1500;
/** The smallest MTU an IPv4 host must accept (RFC 791); below it nothing works. */
export const MIN_POD_MTU = 576;
/** The smallest MTU of a link that carries IPv6 (RFC 8200): pods with IPv6 addresses need at least this. */
export const MIN_POD_MTU_IPV6 = 1280;
/** An IPv6 outer header is 40 bytes, IPv4's 20: the overlay on an IPv6 underlay costs 20 more. */
export const IPV6_OUTER_EXTRA = 20;

/** Bytes each routing mode adds to a pod packet on the underlay of a family (the outer header's). */
export function routingOverhead(mode: RoutingMode, underlayFamily: 4 | 6 = 4): number {
  if (mode !== 'tunnel') return 0;
  return TUNNEL_OVERHEAD + (underlayFamily === 6 ? IPV6_OUTER_EXTRA : 0);
}

/**
 * The pods' MTU: the underlay's minus what the routing mode wraps around each
 * packet (VXLAN's 50 bytes in tunnel mode, 70 over an IPv6 underlay; nothing
 * in native mode), and at least 1280 when pods have IPv6 addresses. A
 * configured MTU may be lower, never higher: a pod sending packets the
 * underlay cannot carry whole would see them dropped or fragmented, which is
 * an error to report at start, not to find later as a stalled connection.
 * Without a detected underlay, a configured value is taken as given and the
 * default assumes Ethernet.
 */
export function resolvePodMtu(o: { mode: RoutingMode; underlayMtu?: number; configured?: number; underlayFamily?: 4 | 6; ipv6Pods?: boolean }): number {
  const overhead = routingOverhead(o.mode, o.underlayFamily);
  // Pods with IPv6 addresses (and the IPv6 underlay itself) need IPv6's minimum link MTU.
  const min = o.ipv6Pods === true ? MIN_POD_MTU_IPV6 : MIN_POD_MTU;
  if (o.underlayMtu !== undefined && !(Number.isInteger(o.underlayMtu) && o.underlayMtu - overhead >= min && (o.underlayFamily !== 6 || o.underlayMtu >= MIN_POD_MTU_IPV6))) {
    throw new NodeConfigError(`underlay MTU ${o.underlayMtu} leaves no room for pod packets of at least ${min} bytes in ${o.mode} mode (overhead ${overhead}${o.underlayFamily === 6 ? ', an IPv6 underlay' : ''})`);
  }
  const limit = (o.underlayMtu ?? DEFAULT_UNDERLAY_MTU) - overhead;
  if (o.configured === undefined) return limit;
  if (!Number.isInteger(o.configured) || o.configured < min) {
    throw new NodeConfigError(`--mtu ${o.configured} is not an integer of at least ${min}${min === MIN_POD_MTU_IPV6 ? ' (pods have IPv6 addresses)' : ''}`);
  }
  if (o.underlayMtu !== undefined && o.configured > limit) {
    throw new NodeConfigError(
      `--mtu ${o.configured} is larger than the underlay carries in ${o.mode} mode: underlay MTU ${o.underlayMtu}${overhead > 0 ? ` - ${overhead} bytes of VXLAN${o.underlayFamily === 6 ? ' over IPv6' : ''}` : ''} = ${limit}`,
    );
  }
  return o.configured;
}
