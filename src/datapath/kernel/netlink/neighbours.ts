import { type IpFamily, formatIp, ipFromBytes, ipToBytes, parseIp } from '../../../netip/index.js';
import { bytesToMac, macToBytes } from './address.js';
import { familyNumber } from './addresses.js';
import { MessageBuilder, type NetlinkMessage, decodeNdMsg, encodeNdMsg } from './codec.js';
import { AF_INET, AF_INET6, NDA, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, NTF_PROXY, NUD, type NeighbourStateName, RTM } from './constants.js';

export interface NeighbourSpec {
  /** Interface index. */
  index: number;
  ip: string;
  /** Link-layer address; required unless the entry is a proxy or NOARP one. */
  mac?: string;
  /** NUD state; permanent unless given. */
  state?: NeighbourStateName;
  /** A proxy entry (answer for this address on the link), as `ip neigh add proxy`. */
  proxy?: boolean;
}

/** A neighbour (ARP / NDP) entry as RTM_GETNEIGH describes it. */
export interface Neighbour {
  index: number;
  family: IpFamily;
  ip: string;
  mac?: string;
  /** NUD_* bits. */
  state: number;
  /** The names of the NUD bits set ("permanent", "reachable", ...). */
  states: NeighbourStateName[];
  proxy: boolean;
}

function encodeNeighbour(type: number, flags: number, spec: NeighbourSpec): MessageBuilder {
  if (!Number.isInteger(spec.index) || spec.index <= 0) throw new RangeError(`interface index ${spec.index} is not positive`);
  const ip = parseIp(spec.ip);
  const b = new MessageBuilder(type, flags).struct(
    encodeNdMsg({
      family: familyNumber(ip.family),
      index: spec.index,
      state: type === RTM.DELNEIGH ? 0 : NUD[spec.state ?? 'permanent'],
      flags: spec.proxy === true ? NTF_PROXY : 0,
    }),
  );
  b.bytes(NDA.DST, ipToBytes(ip));
  if (spec.mac !== undefined && type !== RTM.DELNEIGH) b.bytes(NDA.LLADDR, macToBytes(spec.mac));
  return b;
}

export function encodeAddNeighbour(spec: NeighbourSpec, replace: boolean): MessageBuilder {
  return encodeNeighbour(RTM.NEWNEIGH, NLM_F_CREATE | (replace ? NLM_F_REPLACE : NLM_F_EXCL), spec);
}

export function encodeDeleteNeighbour(spec: NeighbourSpec): MessageBuilder {
  return encodeNeighbour(RTM.DELNEIGH, 0, spec);
}

/** A dump of neighbour entries (proxy entries with `proxy`), filtered by interface in the kernel. */
export function encodeListNeighbours(filter: { family?: IpFamily; index?: number; proxy?: boolean }): MessageBuilder {
  const b = new MessageBuilder(RTM.GETNEIGH, 0).struct(encodeNdMsg({ family: familyNumber(filter.family), flags: filter.proxy === true ? NTF_PROXY : 0 }));
  if (filter.index !== undefined) b.u32(NDA.IFINDEX, filter.index);
  return b;
}

export function decodeNeighbour(msg: NetlinkMessage): Neighbour | undefined {
  const { header, attrs } = decodeNdMsg(msg.payload);
  const family: IpFamily | undefined = header.family === AF_INET ? 4 : header.family === AF_INET6 ? 6 : undefined;
  const dst = attrs.get(NDA.DST);
  if (family === undefined || dst === undefined) return undefined;
  const n: Neighbour = {
    index: header.index,
    family,
    ip: formatIp(ipFromBytes(dst)),
    state: header.state,
    states: (Object.keys(NUD) as NeighbourStateName[]).filter((k) => (header.state & NUD[k]) !== 0),
    proxy: (header.flags & NTF_PROXY) !== 0,
  };
  const ll = attrs.get(NDA.LLADDR);
  if (ll !== undefined) n.mac = bytesToMac(ll);
  return n;
}
