import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KernelError, errnoName, errnoNumber, toKernelError } from '../errors.js';
import { NetipError, NetipErrorCode, formatIp, ipFromBytes } from '../../../netip/index.js';
import { formatPrefix, parsePrefix } from './address.js';
import { decodeAddress, encodeAddAddress, encodeDeleteAddress } from './addresses.js';
import {
  Attributes,
  MessageBuilder,
  NetlinkFormatError,
  NetlinkFormatErrorCode,
  decodeAck,
  decodeDone,
  decodeIfInfoMsg,
  decodeTcMsg,
  encodeIfInfoMsg,
  parseMessages,
} from './codec.js';
import {
  IFF_UP,
  IFLA,
  IFLA_INFO_DATA,
  IFLA_INFO_KIND,
  IFLA_VXLAN,
  NLA_F_NESTED,
  NLM_F_ACK,
  NLM_F_ACK_TLVS,
  NLM_F_CAPPED,
  NLM_F_CREATE,
  NLM_F_EXCL,
  NLM_F_REPLACE,
  NLM_F_REQUEST,
  NLMSG_DONE,
  NLMSG_ERROR,
  NLMSGERR_ATTR_MSG,
  NLMSGERR_ATTR_OFFS,
  RTM,
  TCA,
  TCA_BPF,
  VETH_INFO_PEER,
} from './constants.js';
import { decodeLink, encodeCreateVeth, encodeCreateVxlan, encodeSetLink } from './links.js';
import { decodeNeighbour, encodeAddNeighbour } from './neighbours.js';
import { decodeRoute, encodeAddRoute, encodeDeleteRoute } from './routes.js';
import { decodeBpfFilter, encodeAddBpfFilter } from './tc.js';

/** Encodes a builder and reads it back as the single message it is. */
function roundTrip(b: MessageBuilder, seq = 7) {
  const bytes = b.encode(seq, NLM_F_REQUEST | NLM_F_ACK);
  assert.equal(bytes.length % 4, 0, 'messages are 4-byte aligned');
  const msgs = parseMessages(bytes);
  assert.equal(msgs.length, 1);
  return msgs[0]!;
}

describe('netlink codec', () => {
  it('writes the header, flags and sequence number, and aligns attributes', () => {
    const m = roundTrip(new MessageBuilder(RTM.GETLINK, 0).struct(encodeIfInfoMsg({ index: 3 })).string(IFLA.IFNAME, 'abc'), 42);
    assert.equal(m.type, RTM.GETLINK);
    assert.equal(m.flags, NLM_F_REQUEST | NLM_F_ACK);
    assert.equal(m.seq, 42);
    assert.equal(m.pid, 0);
    const { header, attrs } = decodeIfInfoMsg(m.payload);
    assert.equal(header.index, 3);
    assert.equal(attrs.string(IFLA.IFNAME), 'abc');
    // "abc\0" is 4 bytes: 16 header + 16 ifinfomsg + 8 attribute.
    assert.equal(m.payload.length, 16 + 8);
  });

  it('splits several messages of one buffer and checks every length', () => {
    const a = new MessageBuilder(RTM.SETLINK, 0).struct(encodeIfInfoMsg({ index: 1 })).string(IFLA.IFNAME, 'x').encode(1);
    const b = new MessageBuilder(RTM.SETLINK, 0).struct(encodeIfInfoMsg({ index: 2 })).u32(IFLA.MTU, 1400).encode(2);
    const both = new Uint8Array(a.length + b.length);
    both.set(a);
    both.set(b, a.length);
    assert.deepEqual(
      parseMessages(both).map((m) => m.seq),
      [1, 2],
    );
    assert.throws(() => parseMessages(both.subarray(0, a.length + 8)), NetlinkFormatError);
    const lying = a.slice();
    new DataView(lying.buffer).setUint32(0, 4096, true);
    assert.throws(() => parseMessages(lying), (err: unknown) => err instanceof NetlinkFormatError && err.code === NetlinkFormatErrorCode.MALFORMED && err.name === 'NetlinkFormatError');
  });

  it('encodes a veth pair with its peer in another namespace', () => {
    const m = roundTrip(encodeCreateVeth({ name: 'lxc0', mtu: 1450, peer: { name: 'eth0', mtu: 1450, mac: '02:00:00:00:00:01' } }, 33));
    assert.equal(m.type, RTM.NEWLINK);
    assert.equal(m.flags & (NLM_F_CREATE | NLM_F_EXCL), NLM_F_CREATE | NLM_F_EXCL);
    const { attrs } = decodeIfInfoMsg(m.payload);
    assert.equal(attrs.string(IFLA.IFNAME), 'lxc0');
    assert.equal(attrs.u32(IFLA.MTU), 1450);
    const info = attrs.nested(IFLA.LINKINFO)!;
    assert.equal(info.string(IFLA_INFO_KIND), 'veth');
    const peerRaw = info.nested(IFLA_INFO_DATA)!.get(VETH_INFO_PEER)!;
    // VETH_INFO_PEER starts with an ifinfomsg, so it is not flagged as a pure nest.
    const peer = decodeIfInfoMsg(peerRaw).attrs;
    assert.equal(peer.string(IFLA.IFNAME), 'eth0');
    assert.equal(peer.u32(IFLA.MTU), 1450);
    assert.equal(peer.u32(IFLA.NET_NS_FD), 33);
    assert.deepEqual(Array.from(peer.get(IFLA.ADDRESS)!), [2, 0, 0, 0, 0, 1]);
  });

  it('marks attribute nests with NLA_F_NESTED, except a veth peer', () => {
    const bytes = encodeCreateVeth({ name: 'a', peer: { name: 'b' } }).encode(1);
    const view = new DataView(bytes.buffer);
    // IFLA_IFNAME "a" (8 bytes) follows the 32 header bytes; IFLA_LINKINFO follows it.
    assert.equal(view.getUint16(32 + 8 + 2, true), IFLA.LINKINFO | NLA_F_NESTED);
    const m = parseMessages(bytes)[0]!;
    const data = decodeIfInfoMsg(m.payload).attrs.nested(IFLA.LINKINFO)!.get(IFLA_INFO_DATA)!;
    assert.equal(new DataView(data.buffer, data.byteOffset).getUint16(2, true), VETH_INFO_PEER);
  });

  it('encodes an external VXLAN device with the port in network order', () => {
    const m = roundTrip(encodeCreateVxlan({ name: 'tdlvx', port: 8472, linkIndex: 4, local: '192.0.2.1' }));
    const data = decodeIfInfoMsg(m.payload).attrs.nested(IFLA.LINKINFO)!.nested(IFLA_INFO_DATA)!;
    assert.equal(data.u8(IFLA_VXLAN.COLLECT_METADATA), 1);
    assert.equal(data.u8(IFLA_VXLAN.LEARNING), 0);
    assert.deepEqual(Array.from(data.get(IFLA_VXLAN.PORT)!), [0x21, 0x18]);
    assert.equal(data.u32(IFLA_VXLAN.LINK), 4);
    assert.equal(formatIp(ipFromBytes(data.get(IFLA_VXLAN.LOCAL)!)), '192.0.2.1');
    assert.equal(data.has(IFLA_VXLAN.ID), false);
    // decodeLink reads the same layout back (as the kernel's reply carries it).
    const link = decodeLink(m);
    assert.equal(link.kind, 'vxlan');
    assert.deepEqual(link.vxlan, { vni: 0, port: 8472, external: true, learning: false, linkIndex: 4, local: '192.0.2.1' });
    assert.throws(() => encodeCreateVxlan({ name: 'v', external: false }), TypeError);
  });

  it('sets state with flags/change and renames by index only', () => {
    const m = roundTrip(encodeSetLink(9, { up: true, mtu: 9000, name: 'new0' }));
    const { header, attrs } = decodeIfInfoMsg(m.payload);
    assert.equal(header.index, 9);
    assert.equal(header.flags, IFF_UP);
    assert.equal(header.change, IFF_UP);
    assert.equal(attrs.string(IFLA.IFNAME), 'new0');
    assert.equal(attrs.u32(IFLA.MTU), 9000);
    assert.throws(() => encodeSetLink('eth0', { name: 'x' }), TypeError);
    const down = decodeIfInfoMsg(roundTrip(encodeSetLink('eth0', { up: false })).payload);
    assert.equal(down.header.flags, 0);
    assert.equal(down.header.change, IFF_UP);
    assert.equal(down.attrs.string(IFLA.IFNAME), 'eth0');
  });

  it('refuses interface names the kernel would refuse, before sending anything', () => {
    assert.throws(() => encodeSetLink('a-name-of-16-byt', { up: true }), /too long/);
    assert.throws(() => encodeSetLink('a/b', { up: true }), /contains/);
    assert.throws(() => encodeSetLink('a b', { up: true }), /contains/);
    assert.throws(() => encodeSetLink('eth:0', { up: true }), /contains/);
    assert.throws(() => encodeSetLink(0, { up: true }), RangeError);
  });

  it('round-trips addresses, including IPv6 nodad', () => {
    const v6 = decodeAddress(roundTrip(encodeAddAddress({ index: 5, address: 'fd00:0:0::5/128', nodad: true }, false)))!;
    assert.deepEqual(v6, { index: 5, family: 6, ip: 'fd00::5', prefixLength: 128, scope: 0, flags: 0x02 });
    const v4m = roundTrip(encodeAddAddress({ index: 5, address: '10.0.0.5/32', scope: 'link' }, true));
    assert.equal(v4m.flags & NLM_F_REPLACE, NLM_F_REPLACE);
    assert.deepEqual(decodeAddress(v4m), { index: 5, family: 4, ip: '10.0.0.5', prefixLength: 32, scope: 253, flags: 0 });
    assert.equal(roundTrip(encodeDeleteAddress({ index: 5, address: '10.0.0.5/32' })).type, RTM.DELADDR);
    const netipError = (code: NetipErrorCode) => (err: unknown) => err instanceof NetipError && err.code === code;
    assert.throws(() => encodeAddAddress({ index: 5, address: '10.0.0.5' }, false), netipError(NetipErrorCode.INVALID_PREFIX));
    assert.throws(() => encodeAddAddress({ index: 5, address: '10.0.0.5/33' }, false), netipError(NetipErrorCode.INVALID_PREFIX));
    assert.throws(() => encodeAddAddress({ index: 5, address: 'fe80::1%eth0/64' }, false), netipError(NetipErrorCode.INVALID_ADDRESS));
  });

  it('round-trips routes: default, onlink, table above 255, prefsrc', () => {
    const def = decodeRoute(roundTrip(encodeAddRoute({ dst: 'default', gateway: '10.0.0.1', oif: 3, onlink: true }, false)))!;
    assert.equal(def.dst, 'default');
    assert.equal(def.family, 4);
    assert.equal(def.gateway, '10.0.0.1');
    assert.equal(def.oif, 3);
    assert.equal(def.onlink, true);
    assert.equal(def.scope, 0);
    assert.equal(def.table, 254);
    assert.equal(def.protocol, 3);
    const dev = decodeRoute(roundTrip(encodeAddRoute({ dst: '10.1.0.5/32', oif: 3, prefsrc: '10.0.0.1', table: 1000 }, true)))!;
    assert.equal(dev.scope, 253, 'a route without gateway is link-scoped, as ip route makes it');
    assert.equal(dev.table, 1000);
    assert.equal(dev.prefsrc, '10.0.0.1');
    const v6 = decodeRoute(roundTrip(encodeDeleteRoute({ dst: 'default', family: 6 })))!;
    assert.equal(v6.family, 6);
    assert.equal(v6.scope, 255, 'a delete matches any scope');
    assert.throws(() => encodeAddRoute({ dst: 'default' }, false), /family/);
    assert.throws(() => encodeAddRoute({ dst: '10.0.0.0/8', gateway: 'fd00::1' }, false), /family/);
    assert.throws(() => encodeAddRoute({ dst: '10.0.0.0/8', prefsrc: 'fd00::1' }, false), /family/);
    assert.throws(() => encodeAddRoute({ dst: '10.0.0.0/8', gateway: '10.0.0.256' }, false), NetipError);
    const v6dst = decodeRoute(roundTrip(encodeAddRoute({ dst: 'FD00:0::/064', gateway: 'fd00::1' }, false)))!;
    assert.deepEqual([v6dst.family, v6dst.dst, v6dst.gateway], [6, 'fd00::/64', 'fd00::1']);
  });

  it('round-trips neighbours', () => {
    const n = decodeNeighbour(roundTrip(encodeAddNeighbour({ index: 4, ip: 'fe80::1', mac: '02:00:00:00:00:aa' }, false)))!;
    assert.deepEqual(n, { index: 4, family: 6, ip: 'fe80::1', mac: '02:00:00:00:00:aa', state: 0x80, states: ['permanent'], proxy: false });
  });

  it('encodes a direct-action cls_bpf filter on a clsact hook', () => {
    const m = roundTrip(encodeAddBpfFilter({ index: 4, direction: 'egress', fd: 12, name: 'tdl_prog', priority: 3, handle: 2 }));
    const { header, attrs } = decodeTcMsg(m.payload);
    assert.equal(header.parent, 0xfffffff3);
    assert.equal(header.handle, 2);
    assert.equal(header.info >>> 16, 3);
    assert.equal(attrs.string(TCA.KIND), 'bpf');
    assert.equal(attrs.nested(TCA.OPTIONS)!.u32(TCA_BPF.FD), 12);
    const f = decodeBpfFilter(m, 'egress')!;
    assert.deepEqual(f, { index: 4, direction: 'egress', priority: 3, handle: 2, name: 'tdl_prog', directAction: true });
  });

  it('reads an error ack with its extended-ack text and offset', () => {
    // nlmsgerr: -ENODEV, the (capped) request header, then MSG and OFFS attributes.
    const body = new MessageBuilder(NLMSG_ERROR, NLM_F_CAPPED | NLM_F_ACK_TLVS);
    const err = new Uint8Array(20);
    new DataView(err.buffer).setInt32(0, -19, true);
    new DataView(err.buffer).setUint32(4, 16, true);
    body.struct(err).string(NLMSGERR_ATTR_MSG, 'Unknown device').u32(NLMSGERR_ATTR_OFFS, 36);
    const m = parseMessages(body.encode(5))[0]!;
    assert.deepEqual(decodeAck(m), { errno: 19, message: 'Unknown device', offset: 36 });

    // Uncapped: the whole request (here 24 bytes) is echoed before the attributes.
    const full = new MessageBuilder(NLMSG_ERROR, NLM_F_ACK_TLVS);
    const echo = new Uint8Array(4 + 24);
    new DataView(echo.buffer).setInt32(0, -17, true);
    new DataView(echo.buffer).setUint32(4, 24, true);
    full.struct(echo).string(NLMSGERR_ATTR_MSG, 'exists');
    assert.deepEqual(decodeAck(parseMessages(full.encode(5))[0]!), { errno: 17, message: 'exists' });

    const ok = new MessageBuilder(NLMSG_ERROR, NLM_F_CAPPED).struct(new Uint8Array(20));
    assert.deepEqual(decodeAck(parseMessages(ok.encode(1))[0]!), { errno: 0 });

    const done = new MessageBuilder(NLMSG_DONE, 0).struct(new Uint8Array(4));
    assert.deepEqual(decodeDone(parseMessages(done.encode(1))[0]!), { errno: 0 });
  });

  it('masks the nest and byte-order flags out of attribute types', () => {
    const raw = new Uint8Array([8, 0, 0x12, 0x80, 4, 0, 1, 0]);
    const a = Attributes.parse(raw);
    assert.deepEqual(a.types, [0x12]);
    assert.equal(a.nested(0x12)!.types.length, 1);
    assert.throws(() => Attributes.parse(new Uint8Array([12, 0, 1, 0, 0, 0, 0, 0])), NetlinkFormatError);
  });
});

describe('addresses and errors of the kernel layer', () => {
  it('reads and prints netlink\'s "addr/len" through src/netip: host bits kept, leading zeros allowed', () => {
    assert.deepEqual(parsePrefix('fd00:0::1/64'), { family: 6, ip: 'fd00::1', prefixLength: 64 });
    assert.deepEqual(parsePrefix('10.0.0.5/08'), { family: 4, ip: '10.0.0.5', prefixLength: 8 });
    assert.equal(formatPrefix({ family: 6, ip: 'FD00:0:0::5', prefixLength: 128 }), 'fd00::5/128');
    assert.equal(formatPrefix(parsePrefix('::ffff:192.0.2.1/96')), '::ffff:c000:201/96');
    assert.throws(() => parsePrefix('fe80::1%eth0/64'), (err: unknown) => err instanceof NetipError && err.code === NetipErrorCode.INVALID_ADDRESS);
    assert.throws(() => parsePrefix('10.0.0.256/8'), (err: unknown) => err instanceof NetipError && err.code === NetipErrorCode.INVALID_ADDRESS);
    assert.throws(() => parsePrefix('10.0.0.1/0008'), (err: unknown) => err instanceof NetipError && err.code === NetipErrorCode.INVALID_PREFIX);
  });

  it('names errno values and converts addon errors into KernelError', () => {
    assert.equal(errnoName(19), 'ENODEV');
    assert.equal(errnoName(95), 'EOPNOTSUPP');
    assert.equal(errnoName(11), 'EAGAIN');
    assert.equal(errnoNumber('EEXIST'), 17);
    const addonError = Object.assign(new Error('setns: Invalid argument'), { errno: 22, code: 'EINVAL', syscall: 'setns' });
    const k = toKernelError(addonError, 'netlink socket in /x');
    assert.ok(k instanceof KernelError);
    assert.equal(k.errno, 22);
    assert.equal(k.code, 'EINVAL');
    assert.equal(k.operation, 'netlink socket in /x');
    assert.equal(k.cause, addonError);
    // Node's own system errors carry negative numbers.
    const fsError = Object.assign(new Error('ENOENT'), { errno: -2, code: 'ENOENT', syscall: 'open' });
    assert.equal((toKernelError(fsError) as KernelError).operation, 'open');
    assert.equal((toKernelError(fsError) as KernelError).errno, 2);
    // Anything else is not the kernel's answer and passes through unchanged.
    const typeError = new TypeError('bad');
    assert.equal(toKernelError(typeError, 'x'), typeError);
    const withText = new KernelError(2, 'RTM_NEWROUTE x', 'Nexthop has invalid gateway');
    assert.match(withText.message, /^RTM_NEWROUTE x: ENOENT \(no such file or directory\): Nexthop has invalid gateway$/);
  });
});
