import { isIP } from 'node:net';

/**
 * IP and MAC addresses as the kernel carries them in attributes: 4 or 16
 * bytes in network order, 6 bytes for Ethernet. Inputs are validated here,
 * so nothing malformed reaches an encoder.
 */

export type IpFamily = 4 | 6;

/** The family of a bare address; TypeError for anything else (zone IDs included). */
export function ipFamilyOf(ip: string): IpFamily {
  const family = ip.includes('%') ? 0 : isIP(ip);
  if (family !== 4 && family !== 6) throw new TypeError(`not an IP address: ${JSON.stringify(ip)}`);
  return family;
}

export function ipToBytes(ip: string): Uint8Array {
  if (ipFamilyOf(ip) === 4) return Uint8Array.from(ip.split('.').map(Number));
  let text = ip;
  const out = new Uint8Array(16);
  // An embedded IPv4 tail (::ffff:192.0.2.1) fills the last four bytes.
  let tailBytes: Uint8Array | undefined;
  const lastColon = text.lastIndexOf(':');
  if (text.slice(lastColon + 1).includes('.')) {
    tailBytes = ipToBytes(text.slice(lastColon + 1));
    text = `${text.slice(0, lastColon + 1)}0:0`;
  }
  const [head, rest] = text.split('::') as [string, string | undefined];
  const h = head === '' ? [] : head.split(':');
  const r = rest === undefined || rest === '' ? [] : rest.split(':');
  const groups = rest === undefined ? h : [...h, ...Array<string>(8 - h.length - r.length).fill('0'), ...r];
  groups.forEach((g, i) => {
    const v = parseInt(g, 16);
    out[i * 2] = v >> 8;
    out[i * 2 + 1] = v & 0xff;
  });
  if (tailBytes) out.set(tailBytes, 12);
  return out;
}

/** Formats 4 or 16 bytes; IPv6 in RFC 5952 form (longest zero run compressed). */
export function bytesToIp(bytes: Uint8Array): string {
  if (bytes.length === 4) return Array.from(bytes).join('.');
  if (bytes.length !== 16) throw new TypeError(`an IP address has 4 or 16 bytes, not ${bytes.length}`);
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((bytes[i]! << 8) | bytes[i + 1]!);
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

export interface Prefix {
  family: IpFamily;
  ip: string;
  prefixLength: number;
}

/** Parses "addr/len" (host bits allowed: an interface address is one). */
export function parsePrefix(text: string): Prefix {
  const slash = text.lastIndexOf('/');
  if (slash < 0) throw new TypeError(`not a prefix (addr/len): ${JSON.stringify(text)}`);
  const ip = text.slice(0, slash);
  const lenText = text.slice(slash + 1);
  const family = ipFamilyOf(ip);
  const prefixLength = Number(lenText);
  if (!/^\d{1,3}$/.test(lenText) || prefixLength > (family === 4 ? 32 : 128)) {
    throw new TypeError(`bad prefix length in ${JSON.stringify(text)}`);
  }
  return { family, ip: bytesToIp(ipToBytes(ip)), prefixLength };
}

export function formatPrefix(p: Prefix): string {
  return `${p.ip}/${p.prefixLength}`;
}

export function macToBytes(mac: string): Uint8Array {
  if (!/^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$/.test(mac)) throw new TypeError(`not a MAC address: ${JSON.stringify(mac)}`);
  return Uint8Array.from(mac.split(':').map((h) => parseInt(h, 16)));
}

/** Lower-case colon form of a hardware address of any length (Ethernet's is 6 bytes). */
export function bytesToMac(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join(':');
}
