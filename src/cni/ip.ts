import { isIP } from 'node:net';

/** 4 or 6 for a bare IP address, 0 for anything else. */
export function ipFamily(ip: string): 0 | 4 | 6 {
  // Node accepts IPv6 zone IDs ("fe80::1%eth0"); CNI results (Go's net.ParseIP) do not.
  if (ip.includes('%')) return 0;
  return isIP(ip) as 0 | 4 | 6;
}

/** Family of "addr/len" in CIDR notation, or 0 when it is not a valid CIDR. */
export function cidrFamily(cidr: string): 0 | 4 | 6 {
  const slash = cidr.lastIndexOf('/');
  if (slash < 0) return 0;
  const addr = cidr.slice(0, slash);
  const lenText = cidr.slice(slash + 1);
  if (!/^\d{1,3}$/.test(lenText)) return 0;
  const family = ipFamily(addr);
  if (family === 0) return 0;
  const len = Number(lenText);
  return len <= (family === 4 ? 32 : 128) ? family : 0;
}
