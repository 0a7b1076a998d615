import { formatIp, ipFromBytes, ipToBytes, tryParseIp } from '../../../../netip/index.js';

/**
 * Packets for BPF_PROG_TEST_RUN: Ethernet + IPv4 (+ ICMP echo or UDP),
 * with a valid IPv4 header checksum. Addresses are dotted quads; MACs are
 * colon hex. Enough for the datapath's unit tests, not a packet library.
 */
export interface Ipv4PacketSpec {
  srcMac?: string;
  dstMac?: string;
  src: string;
  dst: string;
  /** 'icmp' (an echo request) unless given. */
  protocol?: 'icmp' | 'udp';
  srcPort?: number;
  dstPort?: number;
  /** Bytes after the ICMP/UDP header. */
  payloadLength?: number;
  ttl?: number;
}

const ETH_P_IP = 0x0800;
const PROTO = { icmp: 1, udp: 17 } as const;

export function ipv4Bytes(ip: string): Buffer {
  const a = tryParseIp(ip);
  if (a?.family !== 4) throw new RangeError(`${ip} is not an IPv4 address`);
  return Buffer.from(ipToBytes(a));
}

export function ipv4String(bytes: Uint8Array): string {
  if (bytes.length !== 4) throw new RangeError(`an IPv4 address has 4 bytes, not ${bytes.length}`);
  return formatIp(ipFromBytes(bytes, 4));
}

function macBytes(mac: string): Buffer {
  const parts = mac.split(':');
  if (parts.length !== 6 || parts.some((p) => !/^[0-9a-fA-F]{2}$/.test(p))) throw new RangeError(`${mac} is not a MAC address`);
  return Buffer.from(parts.map((p) => parseInt(p, 16)));
}

/** The Internet checksum (RFC 1071) of a header. */
export function internetChecksum(buf: Uint8Array): number {
  let sum = 0;
  for (let i = 0; i < buf.length; i += 2) sum += (buf[i]! << 8) | (buf[i + 1] ?? 0);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

export function ipv4Packet(spec: Ipv4PacketSpec): Buffer {
  const protocol = spec.protocol ?? 'icmp';
  const l4Len = 8 + (spec.payloadLength ?? 0);
  const eth = Buffer.alloc(14);
  macBytes(spec.dstMac ?? '02:00:00:00:00:02').copy(eth, 0);
  macBytes(spec.srcMac ?? '02:00:00:00:00:01').copy(eth, 6);
  eth.writeUInt16BE(ETH_P_IP, 12);

  const ip = Buffer.alloc(20);
  ip[0] = 0x45;
  ip.writeUInt16BE(20 + l4Len, 2);
  ip.writeUInt16BE(0x4000, 6); // don't fragment
  ip[8] = spec.ttl ?? 64;
  ip[9] = PROTO[protocol];
  ipv4Bytes(spec.src).copy(ip, 12);
  ipv4Bytes(spec.dst).copy(ip, 16);
  ip.writeUInt16BE(internetChecksum(ip), 10);

  const l4 = Buffer.alloc(l4Len);
  if (protocol === 'icmp') {
    l4[0] = 8; // echo request
    l4.writeUInt16BE(internetChecksum(l4), 2);
  } else {
    l4.writeUInt16BE(spec.srcPort ?? 40000, 0);
    l4.writeUInt16BE(spec.dstPort ?? 53, 2);
    l4.writeUInt16BE(l4Len, 4); // checksum 0: none, allowed over IPv4
  }
  return Buffer.concat([eth, ip, l4]);
}
