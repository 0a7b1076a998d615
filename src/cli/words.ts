/**
 * How the CLI writes a few things that several commands print, so each
 * reads the same everywhere: port ranges and counts of things.
 */
import { protocolName } from '../monitor/index.js';

/** `80/TCP`, `6000-6007/SCTP`, `ANY/UDP` (every port of one protocol), `ANY` (every protocol). */
export function portRangeText(proto: number, first: number, last: number): string {
  if (proto === 0) return 'ANY';
  const range = first === 0 && last === 65535 ? 'ANY' : first === last ? String(first) : `${first}-${last}`;
  return `${range}/${protocolName(proto).toUpperCase()}`;
}

/** A policy map key's port prefix (port/prefixLen, as the map holds it) as the range it covers. */
export function portPrefixText(proto: number, port: number, prefixLen: number): string {
  if (prefixLen === 0) return portRangeText(proto, 0, 65535);
  return portRangeText(proto, port, port + 2 ** (16 - prefixLen) - 1);
}

/** `1 address`, `2 addresses`; the plural is the word plus `s` unless given. */
export function count(n: number, word: string, plural = `${word}s`): string {
  return `${n} ${n === 1 ? word : plural}`;
}

/** `address:port`, an IPv6 address in brackets (as in a URL) so the port stays readable. */
export function addressPort(address: string, port: number): string {
  return address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`;
}
