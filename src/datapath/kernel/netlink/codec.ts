import { endianness } from 'node:os';
import { CodedError } from '../../../errors/codedError.js';
import {
  NLA_F_NESTED,
  NLA_TYPE_MASK,
  NLM_F_ACK_TLVS,
  NLM_F_CAPPED,
  NLMSGERR_ATTR_MSG,
  NLMSGERR_ATTR_OFFS,
} from './constants.js';

/**
 * Netlink's wire format: a 16-byte nlmsghdr, a family header (ifinfomsg,
 * rtmsg, ...) and type-length-value attributes, all 4-byte aligned and in
 * host byte order except where an attribute says otherwise (ports, VNIs).
 */

const HOST_LE = endianness() === 'LE';
export const NLMSG_HDRLEN = 16;
export const NLA_HDRLEN = 4;

export function align4(n: number): number {
  return (n + 3) & ~3;
}

export const NetlinkFormatErrorCode = {
  /** A length or size in the reply does not add up. */
  MALFORMED: 'NETLINK_MALFORMED',
} as const;
export type NetlinkFormatErrorCode = (typeof NetlinkFormatErrorCode)[keyof typeof NetlinkFormatErrorCode];

/**
 * A reply the codec cannot read: a kernel/ABI mismatch or a bug, never user
 * input. The socket hands it to callers as the cause of a KernelError EBADMSG.
 */
export class NetlinkFormatError extends CodedError<NetlinkFormatErrorCode> {
  constructor(message: string) {
    super(NetlinkFormatErrorCode.MALFORMED, message);
  }
}

export interface NetlinkMessage {
  type: number;
  flags: number;
  seq: number;
  pid: number;
  /** Everything after the nlmsghdr (family header and attributes). */
  payload: Uint8Array;
}

function viewOf(b: Uint8Array): DataView {
  return new DataView(b.buffer, b.byteOffset, b.byteLength);
}

// ---- writing ---------------------------------------------------------------

/**
 * Builds one netlink message: header, a family header and attributes, with
 * nests. Lengths are patched in when a nest or the message is finished, so
 * callers never compute them.
 */
export class MessageBuilder {
  private buf = new Uint8Array(256);
  private view = viewOf(this.buf);
  private len = NLMSG_HDRLEN;

  constructor(
    readonly type: number,
    readonly flags: number,
  ) {}

  private reserve(n: number): number {
    const at = this.len;
    const need = at + align4(n);
    if (need > this.buf.length) {
      let size = this.buf.length * 2;
      while (size < need) size *= 2;
      const grown = new Uint8Array(size);
      grown.set(this.buf.subarray(0, this.len));
      this.buf = grown;
      this.view = viewOf(grown);
    }
    // Padding bytes must be zero: the buffer is fresh or was zero-filled on growth.
    this.len = need;
    return at;
  }

  /** Appends a fixed family header (encoded by one of the struct encoders below). */
  struct(bytes: Uint8Array): this {
    this.buf.set(bytes, this.reserve(bytes.length));
    return this;
  }

  private attrHeader(type: number, valueLen: number): number {
    const total = NLA_HDRLEN + valueLen;
    if (total > 0xffff) throw new RangeError(`netlink attribute ${type} is too long (${valueLen} bytes)`);
    const at = this.reserve(total);
    this.view.setUint16(at, total, HOST_LE);
    this.view.setUint16(at + 2, type, HOST_LE);
    return at + NLA_HDRLEN;
  }

  bytes(type: number, value: Uint8Array): this {
    this.buf.set(value, this.attrHeader(type, value.length));
    return this;
  }

  /** A NUL-terminated string (IFLA_IFNAME, TCA_KIND, ...). */
  string(type: number, value: string): this {
    const enc = Buffer.from(value, 'utf8');
    if (enc.includes(0)) throw new TypeError(`netlink string attribute ${type} contains NUL`);
    const at = this.attrHeader(type, enc.length + 1);
    this.buf.set(enc, at);
    this.buf[at + enc.length] = 0;
    return this;
  }

  u8(type: number, value: number): this {
    this.view.setUint8(this.attrHeader(type, 1), value);
    return this;
  }

  u16(type: number, value: number): this {
    this.view.setUint16(this.attrHeader(type, 2), value, HOST_LE);
    return this;
  }

  /** A 16-bit value in network byte order (UDP ports). */
  be16(type: number, value: number): this {
    this.view.setUint16(this.attrHeader(type, 2), value, false);
    return this;
  }

  u32(type: number, value: number): this {
    this.view.setUint32(this.attrHeader(type, 4), value >>> 0, HOST_LE);
    return this;
  }

  i32(type: number, value: number): this {
    this.view.setInt32(this.attrHeader(type, 4), value, HOST_LE);
    return this;
  }

  /** An attribute without value (a flag). */
  flag(type: number): this {
    this.attrHeader(type, 0);
    return this;
  }

  /**
   * A nest: the attributes `fill` writes become the value of `type`.
   * NLA_F_NESTED marks a pure attribute nest; a value that starts with a
   * struct (VETH_INFO_PEER holds an ifinfomsg) is not one, so callers pass
   * `{ nestedFlag: false }` there.
   */
  nest(type: number, fill: (b: this) => void, opts: { nestedFlag?: boolean } = {}): this {
    const at = this.reserve(NLA_HDRLEN);
    fill(this);
    const total = this.len - at;
    if (total > 0xffff) throw new RangeError(`netlink nest ${type} is too long (${total} bytes)`);
    this.view.setUint16(at, total, HOST_LE);
    this.view.setUint16(at + 2, type | (opts.nestedFlag === false ? 0 : NLA_F_NESTED), HOST_LE);
    return this;
  }

  /**
   * The finished message with its sequence number and the socket's own
   * flags (NLM_F_REQUEST, NLM_F_ACK or NLM_F_DUMP) added; a copy, so the
   * builder may be encoded again. The port ID is left 0: the kernel fills it.
   */
  encode(seq: number, extraFlags = 0): Uint8Array {
    this.view.setUint32(0, this.len, HOST_LE);
    this.view.setUint16(4, this.type, HOST_LE);
    this.view.setUint16(6, this.flags | extraFlags, HOST_LE);
    this.view.setUint32(8, seq >>> 0, HOST_LE);
    this.view.setUint32(12, 0, HOST_LE);
    return this.buf.slice(0, this.len);
  }
}

// ---- reading ---------------------------------------------------------------

/** Splits a reply buffer into messages, checking every length against the buffer. */
export function parseMessages(buf: Uint8Array): NetlinkMessage[] {
  const view = viewOf(buf);
  const out: NetlinkMessage[] = [];
  let off = 0;
  while (off < buf.length) {
    if (buf.length - off < NLMSG_HDRLEN) throw new NetlinkFormatError(`truncated netlink header at byte ${off}`);
    const len = view.getUint32(off, HOST_LE);
    if (len < NLMSG_HDRLEN || len > buf.length - off) throw new NetlinkFormatError(`bad netlink message length ${len} at byte ${off}`);
    out.push({
      type: view.getUint16(off + 4, HOST_LE),
      flags: view.getUint16(off + 6, HOST_LE),
      seq: view.getUint32(off + 8, HOST_LE),
      pid: view.getUint32(off + 12, HOST_LE),
      payload: buf.subarray(off + NLMSG_HDRLEN, off + len),
    });
    off += Math.min(align4(len), buf.length - off);
  }
  return out;
}

/** The attributes of one message or nest, by type (first occurrence wins for `get`). */
export class Attributes {
  private constructor(private readonly entries: ReadonlyArray<{ type: number; nested: boolean; value: Uint8Array }>) {}

  static parse(buf: Uint8Array): Attributes {
    const view = viewOf(buf);
    const entries: Array<{ type: number; nested: boolean; value: Uint8Array }> = [];
    let off = 0;
    while (buf.length - off >= NLA_HDRLEN) {
      const len = view.getUint16(off, HOST_LE);
      const rawType = view.getUint16(off + 2, HOST_LE);
      if (len < NLA_HDRLEN || len > buf.length - off) throw new NetlinkFormatError(`bad attribute length ${len} (type ${rawType & NLA_TYPE_MASK}) at byte ${off}`);
      entries.push({ type: rawType & NLA_TYPE_MASK, nested: (rawType & NLA_F_NESTED) !== 0, value: buf.subarray(off + NLA_HDRLEN, off + len) });
      off += align4(len);
    }
    return new Attributes(entries);
  }

  get types(): number[] {
    return this.entries.map((e) => e.type);
  }

  has(type: number): boolean {
    return this.entries.some((e) => e.type === type);
  }

  get(type: number): Uint8Array | undefined {
    return this.entries.find((e) => e.type === type)?.value;
  }

  all(type: number): Uint8Array[] {
    return this.entries.filter((e) => e.type === type).map((e) => e.value);
  }

  private fixed(type: number, size: number): DataView | undefined {
    const v = this.get(type);
    if (v === undefined) return undefined;
    if (v.length < size) throw new NetlinkFormatError(`attribute ${type} has ${v.length} bytes, expected ${size}`);
    return viewOf(v);
  }

  u8(type: number): number | undefined {
    return this.fixed(type, 1)?.getUint8(0);
  }

  u16(type: number): number | undefined {
    return this.fixed(type, 2)?.getUint16(0, HOST_LE);
  }

  be16(type: number): number | undefined {
    return this.fixed(type, 2)?.getUint16(0, false);
  }

  u32(type: number): number | undefined {
    return this.fixed(type, 4)?.getUint32(0, HOST_LE);
  }

  i32(type: number): number | undefined {
    return this.fixed(type, 4)?.getInt32(0, HOST_LE);
  }

  /** A string attribute without its terminating NUL. */
  string(type: number): string | undefined {
    const v = this.get(type);
    if (v === undefined) return undefined;
    const nul = v.indexOf(0);
    return Buffer.from(v.buffer, v.byteOffset, nul < 0 ? v.length : nul).toString('utf8');
  }

  nested(type: number): Attributes | undefined {
    const v = this.get(type);
    return v === undefined ? undefined : Attributes.parse(v);
  }
}

// ---- family headers ----------------------------------------------------------

function fixedStruct(size: number, write: (v: DataView) => void): Uint8Array {
  const b = new Uint8Array(size);
  write(viewOf(b));
  return b;
}

function need(payload: Uint8Array, size: number, what: string): DataView {
  if (payload.length < size) throw new NetlinkFormatError(`${what} needs ${size} bytes, got ${payload.length}`);
  return viewOf(payload);
}

export interface IfInfoMsg {
  family: number;
  type: number;
  index: number;
  flags: number;
  change: number;
}
export const IFINFOMSG_LEN = 16;

export function encodeIfInfoMsg(m: Partial<IfInfoMsg>): Uint8Array {
  return fixedStruct(IFINFOMSG_LEN, (v) => {
    v.setUint8(0, m.family ?? 0);
    v.setUint16(2, m.type ?? 0, HOST_LE);
    v.setInt32(4, m.index ?? 0, HOST_LE);
    v.setUint32(8, (m.flags ?? 0) >>> 0, HOST_LE);
    v.setUint32(12, (m.change ?? 0) >>> 0, HOST_LE);
  });
}

export function decodeIfInfoMsg(payload: Uint8Array): { header: IfInfoMsg; attrs: Attributes } {
  const v = need(payload, IFINFOMSG_LEN, 'ifinfomsg');
  return {
    header: { family: v.getUint8(0), type: v.getUint16(2, HOST_LE), index: v.getInt32(4, HOST_LE), flags: v.getUint32(8, HOST_LE), change: v.getUint32(12, HOST_LE) },
    attrs: Attributes.parse(payload.subarray(IFINFOMSG_LEN)),
  };
}

export interface IfAddrMsg {
  family: number;
  prefixLength: number;
  flags: number;
  scope: number;
  index: number;
}
export const IFADDRMSG_LEN = 8;

export function encodeIfAddrMsg(m: Partial<IfAddrMsg>): Uint8Array {
  return fixedStruct(IFADDRMSG_LEN, (v) => {
    v.setUint8(0, m.family ?? 0);
    v.setUint8(1, m.prefixLength ?? 0);
    v.setUint8(2, m.flags ?? 0);
    v.setUint8(3, m.scope ?? 0);
    v.setUint32(4, m.index ?? 0, HOST_LE);
  });
}

export function decodeIfAddrMsg(payload: Uint8Array): { header: IfAddrMsg; attrs: Attributes } {
  const v = need(payload, IFADDRMSG_LEN, 'ifaddrmsg');
  return {
    header: { family: v.getUint8(0), prefixLength: v.getUint8(1), flags: v.getUint8(2), scope: v.getUint8(3), index: v.getUint32(4, HOST_LE) },
    attrs: Attributes.parse(payload.subarray(IFADDRMSG_LEN)),
  };
}

export interface RtMsg {
  family: number;
  dstLength: number;
  srcLength: number;
  tos: number;
  table: number;
  protocol: number;
  scope: number;
  type: number;
  flags: number;
}
export const RTMSG_LEN = 12;

export function encodeRtMsg(m: Partial<RtMsg>): Uint8Array {
  return fixedStruct(RTMSG_LEN, (v) => {
    v.setUint8(0, m.family ?? 0);
    v.setUint8(1, m.dstLength ?? 0);
    v.setUint8(2, m.srcLength ?? 0);
    v.setUint8(3, m.tos ?? 0);
    v.setUint8(4, m.table ?? 0);
    v.setUint8(5, m.protocol ?? 0);
    v.setUint8(6, m.scope ?? 0);
    v.setUint8(7, m.type ?? 0);
    v.setUint32(8, (m.flags ?? 0) >>> 0, HOST_LE);
  });
}

export function decodeRtMsg(payload: Uint8Array): { header: RtMsg; attrs: Attributes } {
  const v = need(payload, RTMSG_LEN, 'rtmsg');
  return {
    header: {
      family: v.getUint8(0),
      dstLength: v.getUint8(1),
      srcLength: v.getUint8(2),
      tos: v.getUint8(3),
      table: v.getUint8(4),
      protocol: v.getUint8(5),
      scope: v.getUint8(6),
      type: v.getUint8(7),
      flags: v.getUint32(8, HOST_LE),
    },
    attrs: Attributes.parse(payload.subarray(RTMSG_LEN)),
  };
}

export interface NdMsg {
  family: number;
  index: number;
  state: number;
  flags: number;
  type: number;
}
export const NDMSG_LEN = 12;

export function encodeNdMsg(m: Partial<NdMsg>): Uint8Array {
  return fixedStruct(NDMSG_LEN, (v) => {
    v.setUint8(0, m.family ?? 0);
    v.setInt32(4, m.index ?? 0, HOST_LE);
    v.setUint16(8, m.state ?? 0, HOST_LE);
    v.setUint8(10, m.flags ?? 0);
    v.setUint8(11, m.type ?? 0);
  });
}

export function decodeNdMsg(payload: Uint8Array): { header: NdMsg; attrs: Attributes } {
  const v = need(payload, NDMSG_LEN, 'ndmsg');
  return {
    header: { family: v.getUint8(0), index: v.getInt32(4, HOST_LE), state: v.getUint16(8, HOST_LE), flags: v.getUint8(10), type: v.getUint8(11) },
    attrs: Attributes.parse(payload.subarray(NDMSG_LEN)),
  };
}

export interface TcMsg {
  family: number;
  index: number;
  handle: number;
  parent: number;
  /** Filters: priority << 16 | protocol (network order). */
  info: number;
}
export const TCMSG_LEN = 20;

export function encodeTcMsg(m: Partial<TcMsg>): Uint8Array {
  return fixedStruct(TCMSG_LEN, (v) => {
    v.setUint8(0, m.family ?? 0);
    v.setInt32(4, m.index ?? 0, HOST_LE);
    v.setUint32(8, (m.handle ?? 0) >>> 0, HOST_LE);
    v.setUint32(12, (m.parent ?? 0) >>> 0, HOST_LE);
    v.setUint32(16, (m.info ?? 0) >>> 0, HOST_LE);
  });
}

export function decodeTcMsg(payload: Uint8Array): { header: TcMsg; attrs: Attributes } {
  const v = need(payload, TCMSG_LEN, 'tcmsg');
  return {
    header: { family: v.getUint8(0), index: v.getInt32(4, HOST_LE), handle: v.getUint32(8, HOST_LE), parent: v.getUint32(12, HOST_LE), info: v.getUint32(16, HOST_LE) },
    attrs: Attributes.parse(payload.subarray(TCMSG_LEN)),
  };
}

/** A 16-bit value from host to network order (tcm_info's protocol half). */
export function htons(v: number): number {
  return HOST_LE ? ((v & 0xff) << 8) | ((v >> 8) & 0xff) : v & 0xffff;
}

// ---- acknowledgements --------------------------------------------------------

export interface NetlinkAck {
  /** 0 for success, else a positive errno. */
  errno: number;
  /** The kernel's extended-ack text, when it gave one. */
  message?: string;
  /** Offset of the offending attribute in the request, when the kernel named one. */
  offset?: number;
}

function extAck(attrs: Attributes): Pick<NetlinkAck, 'message' | 'offset'> {
  const out: Pick<NetlinkAck, 'message' | 'offset'> = {};
  const message = attrs.string(NLMSGERR_ATTR_MSG);
  if (message !== undefined && message !== '') out.message = message;
  const offset = attrs.u32(NLMSGERR_ATTR_OFFS);
  if (offset !== undefined) out.offset = offset;
  return out;
}

/**
 * Reads an NLMSG_ERROR payload: struct nlmsgerr (the negative errno, then
 * the request's header, and its payload unless the ack is capped), then the
 * extended-ack attributes when NLM_F_ACK_TLVS says they are there.
 */
export function decodeAck(msg: NetlinkMessage): NetlinkAck {
  const v = need(msg.payload, 4 + NLMSG_HDRLEN, 'nlmsgerr');
  const errno = Math.abs(v.getInt32(0, HOST_LE));
  let tlvStart = 4 + NLMSG_HDRLEN;
  if ((msg.flags & NLM_F_CAPPED) === 0) {
    const echoed = v.getUint32(4, HOST_LE);
    tlvStart = 4 + align4(Math.max(echoed, NLMSG_HDRLEN));
  }
  if ((msg.flags & NLM_F_ACK_TLVS) === 0 || tlvStart >= msg.payload.length) return { errno };
  return { errno, ...extAck(Attributes.parse(msg.payload.subarray(tlvStart))) };
}

/** Reads an NLMSG_DONE payload: the dump's status (an int) and its extended ack. */
export function decodeDone(msg: NetlinkMessage): NetlinkAck {
  if (msg.payload.length < 4) return { errno: 0 };
  const errno = Math.abs(viewOf(msg.payload).getInt32(0, HOST_LE));
  if ((msg.flags & NLM_F_ACK_TLVS) === 0 || msg.payload.length <= 4) return { errno };
  return { errno, ...extAck(Attributes.parse(msg.payload.subarray(4))) };
}
