/**
 * The L4 part of a map key: protocol plus a port prefix. The datapath's policy
 * map is a longest-prefix match over (protocol, port), so a port range is held
 * as the fewest power-of-two aligned blocks that cover it exactly.
 */
import { PolicyArgumentError } from './errors.js';
import { Proto, protocolName } from './types.js';

export const PORT_BITS = 16;
export const MAX_PORT = 0xffff;

/** proto 0 means any protocol, and then port = prefixLen = 0. prefixLen 0 = every port of `proto`. */
export interface PortKey {
  readonly proto: number;
  readonly port: number;
  readonly prefixLen: number;
}

export const ANY_PORT_KEY: PortKey = Object.freeze({ proto: Proto.Any, port: 0, prefixLen: 0 });

export function allPortsOf(proto: number): PortKey {
  return proto === Proto.Any ? ANY_PORT_KEY : { proto, port: 0, prefixLen: 0 };
}

/** Inclusive [first, last] ports of a key. */
export function portRangeOf(k: PortKey): [number, number] {
  const size = 1 << (PORT_BITS - k.prefixLen);
  return [k.port, k.port + size - 1];
}

/**
 * Splits the inclusive range [first, last] into aligned prefix blocks, lowest
 * first. [80, 90] → 80/13 (80–87), 88/15 (88–89), 90/16.
 */
export function portRangeToPrefixes(first: number, last: number): Array<{ port: number; prefixLen: number }> {
  if (!Number.isInteger(first) || !Number.isInteger(last) || first < 0 || last > MAX_PORT || first > last) {
    throw new RangeError(`invalid port range ${first}-${last}`);
  }
  const out: Array<{ port: number; prefixLen: number }> = [];
  let cur = first;
  while (cur <= last) {
    // Largest block aligned at `cur` that stays inside the range.
    let bits = 0;
    while (bits < PORT_BITS && cur % (1 << (bits + 1)) === 0 && cur + (1 << (bits + 1)) - 1 <= last) bits++;
    out.push({ port: cur, prefixLen: PORT_BITS - bits });
    cur += 1 << bits;
  }
  return out;
}

/** Keys for `proto` over [first, last]; the full range is one all-ports key. */
export function portKeysFor(proto: number, first: number, last: number): PortKey[] {
  if (proto === Proto.Any) return [ANY_PORT_KEY];
  if (first === 0 && last === MAX_PORT) return [allPortsOf(proto)];
  return portRangeToPrefixes(first, last).map((p) => ({ proto, port: p.port, prefixLen: p.prefixLen }));
}

/**
 * Specificity for the lookup order: a protocol-qualified key beats "any
 * protocol", and a longer port prefix beats a shorter one.
 */
export function portKeyRank(k: PortKey): number {
  return k.proto === Proto.Any ? 0 : 1 + k.prefixLen;
}

/** Does `outer` match every packet `inner` matches? */
export function portKeyCovers(outer: PortKey, inner: PortKey): boolean {
  if (outer.proto === Proto.Any) return true;
  if (outer.proto !== inner.proto || outer.prefixLen > inner.prefixLen) return false;
  const [lo, hi] = portRangeOf(outer);
  return inner.port >= lo && inner.port <= hi;
}

export function formatPortKey(k: PortKey): string {
  if (k.proto === Proto.Any) return 'any';
  const proto = protocolName(k.proto);
  if (k.prefixLen === 0) return `${proto}/*`;
  const [lo, hi] = portRangeOf(k);
  return lo === hi ? `${proto}/${lo}` : `${proto}/${lo}-${hi}`;
}

/**
 * Reads `80/tcp`, `53/UDP`, `443` (TCP) or `icmp` as given to `policy trace
 * --dport`; throws PolicyArgumentError with the offending text otherwise.
 */
export function parsePortProtocol(text: string): { port: number; proto: number } {
  const m = /^(?:(\d{1,5})(?:\/(tcp|udp|sctp))?|(icmp))$/i.exec(text.trim());
  if (m === null) throw new PolicyArgumentError(`${JSON.stringify(text)} is not <port>[/tcp|udp|sctp] or icmp`);
  if (m[3] !== undefined) return { port: 0, proto: Proto.ICMP };
  const port = Number(m[1]);
  if (port < 1 || port > MAX_PORT) throw new PolicyArgumentError(`port ${port} is outside 1-65535`);
  const name = (m[2] ?? 'tcp').toLowerCase();
  return { port, proto: name === 'udp' ? Proto.UDP : name === 'sctp' ? Proto.SCTP : Proto.TCP };
}
