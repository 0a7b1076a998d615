import { TUNNEL_OVERHEAD } from '../datapath/limits.js';
import type { RoutingMode } from '../datapath/types.js';
import { NodeConfigError } from './errors.js';

/** Ethernet's MTU: what an underlay is assumed to carry when it cannot be detected. */
export const DEFAULT_UNDERLAY_MTU = 1500;
/** The smallest MTU an IPv4 host must accept (RFC 791); below it nothing works. */
export const MIN_POD_MTU = 576;

/** Bytes each routing mode adds to a pod packet on the underlay. */
export function routingOverhead(mode: RoutingMode): number {
  return mode === 'tunnel' ? TUNNEL_OVERHEAD : 0;
}

/**
 * The pods' MTU: the underlay's minus what the routing mode wraps around each
 * packet (VXLAN's 50 bytes in tunnel mode, nothing in native mode). A
 * configured MTU may be lower, never higher: a pod sending packets the
 * underlay cannot carry whole would see them dropped or fragmented, which is
 * an error to report at start, not to find later as a stalled connection.
 * Without a detected underlay, a configured value is taken as given and the
 * default assumes Ethernet.
 */
export function resolvePodMtu(o: { mode: RoutingMode; underlayMtu?: number; configured?: number }): number {
  const overhead = routingOverhead(o.mode);
  if (o.underlayMtu !== undefined && !(Number.isInteger(o.underlayMtu) && o.underlayMtu - overhead >= MIN_POD_MTU)) {
    throw new NodeConfigError(`underlay MTU ${o.underlayMtu} leaves no room for pod packets of at least ${MIN_POD_MTU} bytes in ${o.mode} mode (overhead ${overhead})`);
  }
  const limit = (o.underlayMtu ?? DEFAULT_UNDERLAY_MTU) - overhead;
  if (o.configured === undefined) return limit;
  if (!Number.isInteger(o.configured) || o.configured < MIN_POD_MTU) {
    throw new NodeConfigError(`--mtu ${o.configured} is not an integer of at least ${MIN_POD_MTU}`);
  }
  if (o.underlayMtu !== undefined && o.configured > limit) {
    throw new NodeConfigError(
      `--mtu ${o.configured} is larger than the underlay carries in ${o.mode} mode: underlay MTU ${o.underlayMtu}${overhead > 0 ? ` - ${overhead} bytes of VXLAN` : ''} = ${limit}`,
    );
  }
  return o.configured;
}
