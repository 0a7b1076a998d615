import { type IpFamily, formatIp, ipFromBytes, ipToBytes } from '../../../netip/index.js';
import { parseSpecPrefix } from './address.js';
import { MessageBuilder, type NetlinkMessage, decodeIfAddrMsg, encodeIfAddrMsg } from './codec.js';
import { AF_INET, AF_INET6, AF_UNSPEC, IFA, IFA_F_NODAD, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, RT_SCOPE, RTM, type RouteScopeName } from './constants.js';

/** An interface address as RTM_GETADDR describes it. */
export interface Address {
  /** Interface index. */
  index: number;
  family: IpFamily;
  ip: string;
  prefixLength: number;
  /** rt_scope (0 universe, 253 link, 254 host). */
  scope: number;
  /** IFA_F_* flags (nodad, permanent, tentative, ...). */
  flags: number;
  label?: string;
}

export interface AddressSpec {
  /** Interface index. */
  index: number;
  /** "ip/len", e.g. "10.0.0.5/32" or "fd00::5/128". */
  address: string;
  /** Skip duplicate address detection (IPv6): usable at once. */
  nodad?: boolean;
  scope?: RouteScopeName;
}

export function familyNumber(family: IpFamily | undefined): number {
  return family === undefined ? AF_UNSPEC : family === 4 ? AF_INET : AF_INET6;
}

function familyOf(af: number): IpFamily | undefined {
  return af === AF_INET ? 4 : af === AF_INET6 ? 6 : undefined;
}

function encodeAddress(type: number, flags: number, spec: AddressSpec): MessageBuilder {
  const a = parseSpecPrefix(spec.address);
  const ifaFlags = spec.nodad === true ? IFA_F_NODAD : 0;
  const b = new MessageBuilder(type, flags).struct(
    encodeIfAddrMsg({ family: familyNumber(a.address.family), prefixLength: a.length, flags: ifaFlags, scope: RT_SCOPE[spec.scope ?? 'universe'], index: spec.index }),
  );
  const bytes = ipToBytes(a.address);
  // For a plain (not point-to-point) address both carry the same address.
  b.bytes(IFA.LOCAL, bytes).bytes(IFA.ADDRESS, bytes);
  if (type !== RTM.DELADDR) b.u32(IFA.FLAGS, ifaFlags);
  return b;
}

export function encodeAddAddress(spec: AddressSpec, replace: boolean): MessageBuilder {
  return encodeAddress(RTM.NEWADDR, NLM_F_CREATE | (replace ? NLM_F_REPLACE : NLM_F_EXCL), spec);
}

export function encodeDeleteAddress(spec: AddressSpec): MessageBuilder {
  return encodeAddress(RTM.DELADDR, 0, spec);
}

/** A dump of one family's (or every) address, of one interface when `index` is given (kernel-side filter). */
export function encodeListAddresses(filter: { family?: IpFamily; index?: number }): MessageBuilder {
  return new MessageBuilder(RTM.GETADDR, 0).struct(encodeIfAddrMsg({ family: familyNumber(filter.family), index: filter.index ?? 0 }));
}

export function decodeAddress(msg: NetlinkMessage): Address | undefined {
  const { header, attrs } = decodeIfAddrMsg(msg.payload);
  const family = familyOf(header.family);
  // IPv4's IFA_LOCAL is the interface's own address (IFA_ADDRESS is the peer's on point-to-point links).
  const raw = attrs.get(IFA.LOCAL) ?? attrs.get(IFA.ADDRESS);
  if (family === undefined || raw === undefined) return undefined;
  const a: Address = {
    index: header.index,
    family,
    ip: formatIp(ipFromBytes(raw)),
    prefixLength: header.prefixLength,
    scope: header.scope,
    flags: attrs.u32(IFA.FLAGS) ?? header.flags,
  };
  const label = attrs.string(IFA.LABEL);
  if (label !== undefined) a.label = label;
  return a;
}
