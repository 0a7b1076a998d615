/**
 * The source ports SNAT may give a flow. A mapping's port must never be one
 * the node itself could pick for its own connection (the reply of that
 * connection would be taken for the mapping's), nor a NodePort (a client
 * reaching the node's NodePort from that port would look like a reply). So
 * the ports are the configured range (--bpf-nat-port-range, 1024-65535
 * unless given) less the node's ephemeral range (net.ipv4.ip_local_port_range,
 * read at start) and less the NodePort range: by default 1024-29999 and
 * 61000-65535, 33,512 ports per destination. The datapath config holds at
 * most NAT_PORT_RANGES ranges: the widest are kept.
 */
import { readFileSync } from 'node:fs';
import { NAT_PORT_MAX, NAT_PORT_MIN, NAT_PORT_RANGES } from './constants.js';
import type { NatPortRangeValue } from './layout.js';

export type PortRange = readonly [min: number, max: number];

/** Below 1024 are the privileged ports: a reply to one is never taken for a mapping's. */
export const DEFAULT_NAT_PORT_RANGE: PortRange = [1024, 65535];
/** Kubernetes' default service-node-port-range. */
export const NODEPORT_RANGE: PortRange = [30000, 32767];
/** Linux's default net.ipv4.ip_local_port_range, when /proc cannot be read. */
export const LINUX_EPHEMERAL_RANGE: PortRange = [32768, 60999];

export class NatPortRangeError extends Error {
  override readonly name = 'NatPortRangeError';
}

/** "MIN-MAX" → a range of valid ports, MIN ≤ MAX; throws NatPortRangeError with what is wrong. */
export function parsePortRange(text: string, what = '--bpf-nat-port-range'): PortRange {
  const m = /^(\d{1,5})-(\d{1,5})$/.exec(text.trim());
  const min = m ? Number(m[1]) : NaN;
  const max = m ? Number(m[2]) : NaN;
  if (!m || min < 1 || max > 65535 || min > max) throw new NatPortRangeError(`${what} must be MIN-MAX with 1 ≤ MIN ≤ MAX ≤ 65535, got ${JSON.stringify(text)}`);
  return [min, max];
}

/** Whether `text` is a valid MIN-MAX port range. */
export function isPortRange(text: string): boolean {
  try {
    parsePortRange(text);
    return true;
  } catch {
    return false;
  }
}

/** The node's ephemeral port range from /proc (the agent's network namespace is the node's). */
export function readEphemeralRange(path = '/proc/sys/net/ipv4/ip_local_port_range'): PortRange {
  try {
    const [min, max] = readFileSync(path, 'utf8').trim().split(/\s+/).map(Number);
    if (Number.isInteger(min) && Number.isInteger(max) && min! >= 1 && min! <= max! && max! <= 65535) return [min!, max!];
  } catch {
    // Not Linux, or /proc not mounted: Linux's default is the best guess (and the usual value).
  }
  return LINUX_EPHEMERAL_RANGE;
}

/** `range` less each of `holes`, widest first, at most NAT_PORT_RANGES; throws when nothing is left. */
export function natPortRanges(range: PortRange, holes: readonly PortRange[]): PortRange[] {
  let left: PortRange[] = [range];
  for (const [hmin, hmax] of holes) {
    left = left.flatMap(([min, max]): PortRange[] => {
      if (hmax < min || hmin > max) return [[min, max]];
      const out: PortRange[] = [];
      if (hmin > min) out.push([min, hmin - 1]);
      if (hmax < max) out.push([hmax + 1, max]);
      return out;
    });
  }
  const widest = left.sort((a, b) => b[1] - b[0] - (a[1] - a[0])).slice(0, NAT_PORT_RANGES);
  if (widest.length === 0) {
    throw new NatPortRangeError(`no SNAT port is left of ${range.join('-')} once the node's own ports (${holes.map((h) => h.join('-')).join(', ')}) are taken out`);
  }
  return widest.sort((a, b) => a[0] - b[0]);
}

/** This node's SNAT ranges for a --bpf-nat-port-range value, as the datapath config takes them. */
export function nodeNatPortRanges(configured: string, ephemeral: PortRange = readEphemeralRange()): NatPortRangeValue[] {
  return natPortRanges(parsePortRange(configured), [ephemeral, NODEPORT_RANGE]).map(([min, max]) => ({ min, max }));
}

/** The config's nat_ports array: the ranges, then empty slots; none → the programs' built-in range. */
export function configNatPorts(ranges: readonly NatPortRangeValue[] = [{ min: NAT_PORT_MIN, max: NAT_PORT_MAX }]): NatPortRangeValue[] {
  const out = ranges.slice(0, NAT_PORT_RANGES).map((r) => ({ min: r.min, max: r.max }));
  while (out.length < NAT_PORT_RANGES) out.push({ min: 0, max: 0 });
  return out;
}
