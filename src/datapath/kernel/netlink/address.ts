import { type InterfaceAddress, type IpFamily, formatInterfaceAddress, formatIp, parseInterfaceAddress, parseIp } from '../../../netip/index.js';

/**
 * Netlink's text forms of addresses over src/netip (which does all IP
 * parsing and printing), and the MAC addresses that only netlink carries.
 * IP addresses travel in attributes as netip's network-order bytes
 * (`ipToBytes(parseIp(text))`, `formatIp(ipFromBytes(bytes))`).
 */

/** A prefix as netlink's API has always spelled it: canonical address text, host bits kept. */
export interface Prefix {
  family: IpFamily;
  ip: string;
  prefixLength: number;
}

/**
 * Reads an "addr/len" that a netlink spec (address, route destination)
 * takes: host bits are kept, since an interface address has them, and the
 * length may have leading zeros ("/08"), as `ip` accepts. Throws NetipError.
 */
export function parseSpecPrefix(text: string): InterfaceAddress {
  return parseInterfaceAddress(text, { leadingZeros: true });
}

/** Parses "addr/len" (host bits allowed: an interface address is one); throws NetipError. */
export function parsePrefix(text: string): Prefix {
  const a = parseSpecPrefix(text);
  return { family: a.address.family, ip: formatIp(a.address), prefixLength: a.length };
}

/** Canonical "addr/len" text; throws NetipError when `ip` is no address. */
export function formatPrefix(p: Prefix): string {
  return formatInterfaceAddress({ address: parseIp(p.ip), length: p.prefixLength });
}

export function macToBytes(mac: string): Uint8Array {
  if (!/^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$/.test(mac)) throw new TypeError(`not a MAC address: ${JSON.stringify(mac)}`);
  return Uint8Array.from(mac.split(':').map((h) => parseInt(h, 16)));
}

/** Lower-case colon form of a hardware address of any length (Ethernet's is 6 bytes). */
export function bytesToMac(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join(':');
}
