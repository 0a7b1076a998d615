import { type IpAddress, type IpFamily, formatIp, ipFromBytes, ipToBytes, parseIp } from '../../../netip/index.js';
import { parseSpecPrefix } from './address.js';
import { familyNumber } from './addresses.js';
import { MessageBuilder, type NetlinkMessage, decodeRtMsg, encodeRtMsg } from './codec.js';
import {
  AF_INET,
  AF_INET6,
  NLM_F_CREATE,
  NLM_F_EXCL,
  NLM_F_REPLACE,
  RT_SCOPE,
  RT_TABLE_MAIN,
  RT_TABLE_UNSPEC,
  RTA,
  RTM,
  RTN_LOCAL,
  RTN_UNICAST,
  RTNH_F_ONLINK,
  RTPROT_BOOT,
  type RouteScopeName,
} from './constants.js';

export const ROUTE_TYPES = { unicast: RTN_UNICAST, local: RTN_LOCAL, blackhole: 6, unreachable: 7, prohibit: 8 } as const;
export type RouteTypeName = keyof typeof ROUTE_TYPES;

export interface RouteSpec {
  /** "addr/len", or "default" (then `family` or `gateway` says which family). */
  dst: string;
  family?: IpFamily;
  gateway?: string;
  /** Output interface index. */
  oif?: number;
  /** The gateway is on the link even though no prefix covers it. */
  onlink?: boolean;
  /** Default: universe with a gateway, link without (as `ip route` does). */
  scope?: RouteScopeName;
  /** Preferred source address of packets the host sends on this route. */
  prefsrc?: string;
  /** Routing table; main (254) unless given. */
  table?: number;
  /** rtm_protocol; "boot" (3) unless given, as `ip route`. */
  protocol?: number;
  /** Metric. */
  priority?: number;
  type?: RouteTypeName;
}

/** A route as RTM_GETROUTE describes it. */
export interface Route {
  family: IpFamily;
  /** "addr/len", or "default" for a zero-length prefix. */
  dst: string;
  gateway?: string;
  oif?: number;
  prefsrc?: string;
  table: number;
  protocol: number;
  /** rt_scope (0 universe, 253 link, 254 host). */
  scope: number;
  /** rtm_type (1 unicast, 2 local, ...). */
  type: number;
  onlink: boolean;
  priority?: number;
}

interface ResolvedDst {
  family: IpFamily;
  /** Absent for "default". */
  address?: IpAddress;
  prefixLength: number;
}

function resolveDst(spec: RouteSpec): ResolvedDst {
  if (spec.dst === 'default') {
    const family = spec.family ?? (spec.gateway !== undefined ? parseIp(spec.gateway).family : undefined);
    if (family === undefined) throw new TypeError('a default route needs a family or a gateway');
    return { family, prefixLength: 0 };
  }
  const p = parseSpecPrefix(spec.dst);
  if (spec.family !== undefined && spec.family !== p.address.family) throw new TypeError(`route ${spec.dst} is not IPv${spec.family}`);
  return { family: p.address.family, address: p.address, prefixLength: p.length };
}

/** An address of the route's family, as an attribute's bytes. */
function routeAddress(text: string, what: string, dst: ResolvedDst, spec: RouteSpec): Uint8Array {
  const a = parseIp(text);
  if (a.family !== dst.family) throw new TypeError(`${what} ${text} is not in the family of ${spec.dst}`);
  return ipToBytes(a);
}

function checkTable(table: number): void {
  if (!Number.isInteger(table) || table < 1 || table > 0xffffffff) throw new RangeError(`routing table ${table} is outside 1..2^32-1`);
}

/** How a route appears in an operation's name ("10.0.0.5/32 via 10.0.0.1 table 100"). */
export function describeRoute(spec: RouteSpec): string {
  const parts = [spec.dst];
  if (spec.gateway !== undefined) parts.push(`via ${spec.gateway}`);
  if (spec.oif !== undefined) parts.push(`oif ${spec.oif}`);
  if (spec.table !== undefined && spec.table !== RT_TABLE_MAIN) parts.push(`table ${spec.table}`);
  return parts.join(' ');
}

function encodeRoute(type: number, flags: number, spec: RouteSpec): MessageBuilder {
  const dst = resolveDst(spec);
  const deleting = type === RTM.DELROUTE;
  const table = spec.table ?? RT_TABLE_MAIN;
  checkTable(table);
  const routeType = ROUTE_TYPES[spec.type ?? 'unicast'];
  let scope: number;
  if (spec.scope !== undefined) scope = RT_SCOPE[spec.scope];
  else if (deleting) scope = RT_SCOPE.nowhere; // matches a route of any scope
  else if (routeType === RTN_LOCAL) scope = RT_SCOPE.host;
  else scope = spec.gateway === undefined && routeType === RTN_UNICAST ? RT_SCOPE.link : RT_SCOPE.universe;
  const b = new MessageBuilder(type, flags).struct(
    encodeRtMsg({
      family: familyNumber(dst.family),
      dstLength: dst.prefixLength,
      // Tables above 255 travel in RTA_TABLE only.
      table: table > 255 ? RT_TABLE_UNSPEC : table,
      protocol: deleting ? (spec.protocol ?? 0) : (spec.protocol ?? RTPROT_BOOT),
      scope,
      type: deleting && spec.type === undefined ? 0 : routeType,
      flags: spec.onlink === true ? RTNH_F_ONLINK : 0,
    }),
  );
  if (dst.address !== undefined) b.bytes(RTA.DST, ipToBytes(dst.address));
  b.u32(RTA.TABLE, table);
  if (spec.gateway !== undefined) b.bytes(RTA.GATEWAY, routeAddress(spec.gateway, 'gateway', dst, spec));
  if (spec.oif !== undefined) {
    if (!Number.isInteger(spec.oif) || spec.oif <= 0) throw new RangeError(`interface index ${spec.oif} is not positive`);
    b.u32(RTA.OIF, spec.oif);
  }
  if (spec.prefsrc !== undefined) b.bytes(RTA.PREFSRC, routeAddress(spec.prefsrc, 'source', dst, spec));
  if (spec.priority !== undefined) b.u32(RTA.PRIORITY, spec.priority);
  return b;
}

export function encodeAddRoute(spec: RouteSpec, replace: boolean): MessageBuilder {
  return encodeRoute(RTM.NEWROUTE, NLM_F_CREATE | (replace ? NLM_F_REPLACE : NLM_F_EXCL), spec);
}

export function encodeDeleteRoute(spec: RouteSpec): MessageBuilder {
  return encodeRoute(RTM.DELROUTE, 0, spec);
}

/**
 * A dump of one family's routes. With strict checking on (the addon turns it
 * on) the kernel filters by table and output interface itself.
 */
export function encodeListRoutes(filter: { family: IpFamily; table?: number; oif?: number }): MessageBuilder {
  const b = new MessageBuilder(RTM.GETROUTE, 0).struct(encodeRtMsg({ family: familyNumber(filter.family) }));
  if (filter.table !== undefined) {
    checkTable(filter.table);
    b.u32(RTA.TABLE, filter.table);
  }
  if (filter.oif !== undefined) b.u32(RTA.OIF, filter.oif);
  return b;
}

export function decodeRoute(msg: NetlinkMessage): Route | undefined {
  const { header, attrs } = decodeRtMsg(msg.payload);
  const family: IpFamily | undefined = header.family === AF_INET ? 4 : header.family === AF_INET6 ? 6 : undefined;
  if (family === undefined) return undefined;
  const dst = attrs.get(RTA.DST);
  const route: Route = {
    family,
    dst: header.dstLength === 0 || dst === undefined ? 'default' : `${formatIp(ipFromBytes(dst))}/${header.dstLength}`,
    table: attrs.u32(RTA.TABLE) ?? header.table,
    protocol: header.protocol,
    scope: header.scope,
    type: header.type,
    onlink: (header.flags & RTNH_F_ONLINK) !== 0,
  };
  const gw = attrs.get(RTA.GATEWAY);
  if (gw !== undefined) route.gateway = formatIp(ipFromBytes(gw));
  const oif = attrs.u32(RTA.OIF);
  if (oif !== undefined) route.oif = oif;
  const src = attrs.get(RTA.PREFSRC);
  if (src !== undefined) route.prefsrc = formatIp(ipFromBytes(src));
  const prio = attrs.u32(RTA.PRIORITY);
  if (prio !== undefined) route.priority = prio;
  return route;
}
