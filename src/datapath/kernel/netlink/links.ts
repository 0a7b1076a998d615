import { validateInterfaceName } from '../../../cni/names.js';
import { formatIp, ipFromBytes, ipToBytes, parseIp } from '../../../netip/index.js';
import { bytesToMac, macToBytes } from './address.js';
import { type Attributes, MessageBuilder, type NetlinkMessage, decodeIfInfoMsg, encodeIfInfoMsg } from './codec.js';
import {
  AF_UNSPEC,
  IFF_UP,
  IFLA,
  IFLA_INFO_DATA,
  IFLA_INFO_KIND,
  IFLA_VXLAN,
  NLM_F_CREATE,
  NLM_F_EXCL,
  OPER_STATES,
  RTEXT_FILTER_SKIP_STATS,
  RTM,
  VETH_INFO_PEER,
} from './constants.js';

/** A link named or by interface index. */
export type LinkRef = string | number;

export interface VxlanInfo {
  /** VNI; 0 in external mode, where each packet's metadata carries it. */
  vni: number;
  /** UDP destination port. */
  port: number;
  /** collect_md: the device takes tunnel metadata from the packet (eBPF sets it). */
  external: boolean;
  learning: boolean;
  /** Underlay device index, when bound to one. */
  linkIndex?: number;
  local?: string;
}

/** A network interface as RTM_GETLINK describes it. */
export interface Link {
  index: number;
  name: string;
  /** Hardware address, lower-case colon form; '' when the link has none. */
  mac: string;
  mtu: number;
  /** Administratively up (IFF_UP). */
  up: boolean;
  /** ifi_flags (IFF_*). */
  flags: number;
  /** RFC 2863 operational state ("up", "down", "lowerlayerdown", ...). */
  operState: string;
  /** The driver kind for virtual links ("veth", "vxlan"); absent for physical ones and lo. */
  kind?: string;
  /** IFLA_LINK: for a veth, the peer's index (in the peer's namespace). */
  linkIndex?: number;
  /** IFLA_LINK_NETNSID: the peer's namespace, as an ID local to this namespace. */
  linkNetnsId?: number;
  masterIndex?: number;
  vxlan?: VxlanInfo;
}

export interface VethPeerSpec {
  name: string;
  /** Create the peer directly in this network namespace (path of its file). */
  netns?: string;
  mtu?: number;
  mac?: string;
}

export interface VethSpec {
  name: string;
  mtu?: number;
  mac?: string;
  peer: VethPeerSpec;
}

export interface VxlanSpec {
  name: string;
  /** UDP port; 4789 (IANA) unless given. */
  port?: number;
  /** VNI of a classic device; omit in external mode. */
  vni?: number;
  /** collect_md mode (IFLA_VXLAN_COLLECT_METADATA); true unless set false. */
  external?: boolean;
  /** FDB learning; off unless set. */
  learning?: boolean;
  /** Underlay device index. */
  linkIndex?: number;
  /** Source address of the tunnel. */
  local?: string;
  mtu?: number;
  ttl?: number;
}

/** What RTM_SETLINK changes; absent fields stay as they are. */
export interface LinkChanges {
  up?: boolean;
  mtu?: number;
  mac?: string;
  name?: string;
}

export const VXLAN_DEFAULT_PORT = 4789;

function checkMtu(mtu: number): void {
  if (!Number.isInteger(mtu) || mtu < 68 || mtu > 65535) throw new RangeError(`MTU ${mtu} is outside 68..65535`);
}

function checkIndex(index: number): void {
  if (!Number.isInteger(index) || index <= 0 || index > 0x7fffffff) throw new RangeError(`interface index ${index} is not a positive 32-bit integer`);
}

/** Validates a LinkRef: an interface name by the kernel's rules, or a positive index. */
export function checkLinkRef(ref: LinkRef): void {
  if (typeof ref === 'number') checkIndex(ref);
  else validateInterfaceName(ref);
}

/** How a link appears in an operation's name. */
export function describeLink(ref: LinkRef): string {
  return typeof ref === 'number' ? `ifindex ${ref}` : ref;
}

/** A link message addressed by index (in the header) or by name (IFLA_IFNAME). */
function addressed(type: number, flags: number, ref: LinkRef, header: { flags?: number; change?: number } = {}): MessageBuilder {
  checkLinkRef(ref);
  const b = new MessageBuilder(type, flags).struct(encodeIfInfoMsg({ family: AF_UNSPEC, index: typeof ref === 'number' ? ref : 0, ...header }));
  if (typeof ref === 'string') b.string(IFLA.IFNAME, ref);
  return b;
}

export function encodeGetLink(ref: LinkRef): MessageBuilder {
  return addressed(RTM.GETLINK, 0, ref).u32(IFLA.EXT_MASK, RTEXT_FILTER_SKIP_STATS);
}

export function encodeListLinks(): MessageBuilder {
  return new MessageBuilder(RTM.GETLINK, 0).struct(encodeIfInfoMsg({ family: AF_UNSPEC })).u32(IFLA.EXT_MASK, RTEXT_FILTER_SKIP_STATS);
}

export function encodeDeleteLink(ref: LinkRef): MessageBuilder {
  return addressed(RTM.DELLINK, 0, ref);
}

/** RTM_NEWLINK of a veth pair; `peerNetnsFd` is an open descriptor of the peer's namespace file. */
export function encodeCreateVeth(spec: VethSpec, peerNetnsFd?: number): MessageBuilder {
  validateInterfaceName(spec.name);
  validateInterfaceName(spec.peer.name);
  const b = new MessageBuilder(RTM.NEWLINK, NLM_F_CREATE | NLM_F_EXCL).struct(encodeIfInfoMsg({ family: AF_UNSPEC }));
  b.string(IFLA.IFNAME, spec.name);
  if (spec.mtu !== undefined) {
    checkMtu(spec.mtu);
    b.u32(IFLA.MTU, spec.mtu);
  }
  if (spec.mac !== undefined) b.bytes(IFLA.ADDRESS, macToBytes(spec.mac));
  b.nest(IFLA.LINKINFO, (li) => {
    li.string(IFLA_INFO_KIND, 'veth');
    li.nest(IFLA_INFO_DATA, (data) => {
      // The peer is an ifinfomsg followed by the peer's own link attributes.
      data.nest(
        VETH_INFO_PEER,
        (peer) => {
          peer.struct(encodeIfInfoMsg({ family: AF_UNSPEC }));
          peer.string(IFLA.IFNAME, spec.peer.name);
          if (spec.peer.mtu !== undefined) {
            checkMtu(spec.peer.mtu);
            peer.u32(IFLA.MTU, spec.peer.mtu);
          }
          if (spec.peer.mac !== undefined) peer.bytes(IFLA.ADDRESS, macToBytes(spec.peer.mac));
          if (peerNetnsFd !== undefined) peer.u32(IFLA.NET_NS_FD, peerNetnsFd);
        },
        { nestedFlag: false },
      );
    });
  });
  return b;
}

export function encodeCreateVxlan(spec: VxlanSpec): MessageBuilder {
  validateInterfaceName(spec.name);
  const external = spec.external ?? true;
  if (!external && spec.vni === undefined) throw new TypeError(`VXLAN ${spec.name}: a VNI is needed unless the device is external`);
  if (spec.vni !== undefined && (!Number.isInteger(spec.vni) || spec.vni < 0 || spec.vni > 0xffffff)) throw new RangeError(`VNI ${spec.vni} is outside 0..16777215`);
  const port = spec.port ?? VXLAN_DEFAULT_PORT;
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new RangeError(`UDP port ${port} is outside 1..65535`);
  const b = new MessageBuilder(RTM.NEWLINK, NLM_F_CREATE | NLM_F_EXCL).struct(encodeIfInfoMsg({ family: AF_UNSPEC }));
  b.string(IFLA.IFNAME, spec.name);
  if (spec.mtu !== undefined) {
    checkMtu(spec.mtu);
    b.u32(IFLA.MTU, spec.mtu);
  }
  b.nest(IFLA.LINKINFO, (li) => {
    li.string(IFLA_INFO_KIND, 'vxlan');
    li.nest(IFLA_INFO_DATA, (data) => {
      if (spec.vni !== undefined) data.u32(IFLA_VXLAN.ID, spec.vni);
      if (external) data.u8(IFLA_VXLAN.COLLECT_METADATA, 1);
      data.u8(IFLA_VXLAN.LEARNING, spec.learning === true ? 1 : 0);
      data.be16(IFLA_VXLAN.PORT, port);
      if (spec.linkIndex !== undefined) {
        checkIndex(spec.linkIndex);
        data.u32(IFLA_VXLAN.LINK, spec.linkIndex);
      }
      if (spec.local !== undefined) {
        const local = parseIp(spec.local);
        data.bytes(local.family === 4 ? IFLA_VXLAN.LOCAL : IFLA_VXLAN.LOCAL6, ipToBytes(local));
      }
      if (spec.ttl !== undefined) data.u8(IFLA_VXLAN.TTL, spec.ttl);
    });
  });
  return b;
}

/**
 * RTM_SETLINK changing state, MTU, MAC or name, and/or moving the link to
 * the namespace whose file descriptor is `netnsFd`. A rename needs the
 * index: IFLA_IFNAME then carries the new name.
 */
export function encodeSetLink(ref: LinkRef, changes: LinkChanges, netnsFd?: number): MessageBuilder {
  if (changes.name !== undefined) {
    validateInterfaceName(changes.name);
    if (typeof ref !== 'number') throw new TypeError('renaming a link needs its index');
  }
  const header = changes.up === undefined ? {} : { flags: changes.up ? IFF_UP : 0, change: IFF_UP };
  const b = addressed(RTM.SETLINK, 0, ref, header);
  if (changes.name !== undefined) b.string(IFLA.IFNAME, changes.name);
  if (changes.mtu !== undefined) {
    checkMtu(changes.mtu);
    b.u32(IFLA.MTU, changes.mtu);
  }
  if (changes.mac !== undefined) b.bytes(IFLA.ADDRESS, macToBytes(changes.mac));
  if (netnsFd !== undefined) b.u32(IFLA.NET_NS_FD, netnsFd);
  return b;
}

function decodeVxlan(data: Attributes): VxlanInfo {
  const info: VxlanInfo = {
    vni: data.u32(IFLA_VXLAN.ID) ?? 0,
    port: data.be16(IFLA_VXLAN.PORT) ?? VXLAN_DEFAULT_PORT,
    external: (data.u8(IFLA_VXLAN.COLLECT_METADATA) ?? 0) !== 0,
    learning: (data.u8(IFLA_VXLAN.LEARNING) ?? 0) !== 0,
  };
  const link = data.u32(IFLA_VXLAN.LINK);
  if (link !== undefined && link !== 0) info.linkIndex = link;
  const local = data.get(IFLA_VXLAN.LOCAL) ?? data.get(IFLA_VXLAN.LOCAL6);
  if (local !== undefined) info.local = formatIp(ipFromBytes(local));
  return info;
}

export function decodeLink(msg: NetlinkMessage): Link {
  const { header, attrs } = decodeIfInfoMsg(msg.payload);
  const link: Link = {
    index: header.index,
    name: attrs.string(IFLA.IFNAME) ?? '',
    mac: bytesToMac(attrs.get(IFLA.ADDRESS) ?? new Uint8Array()),
    mtu: attrs.u32(IFLA.MTU) ?? 0,
    up: (header.flags & IFF_UP) !== 0,
    flags: header.flags,
    operState: OPER_STATES[attrs.u8(IFLA.OPERSTATE) ?? 0] ?? 'unknown',
  };
  const info = attrs.nested(IFLA.LINKINFO);
  const kind = info?.string(IFLA_INFO_KIND);
  if (kind !== undefined) link.kind = kind;
  if (kind === 'vxlan') {
    const data = info?.nested(IFLA_INFO_DATA);
    if (data) link.vxlan = decodeVxlan(data);
  }
  // The kernel leaves IFLA_LINK out when it equals the link's own index, which
  // for a veth means the peer (in another namespace) has the same index.
  const peer = attrs.i32(IFLA.LINK) ?? (kind === 'veth' ? header.index : undefined);
  if (peer !== undefined) link.linkIndex = peer;
  const nsid = attrs.i32(IFLA.LINK_NETNSID);
  if (nsid !== undefined) link.linkNetnsId = nsid;
  const master = attrs.u32(IFLA.MASTER);
  if (master !== undefined && master !== 0) link.masterIndex = master;
  return link;
}
