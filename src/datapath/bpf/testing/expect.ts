/** Assertions over datapath events and conntrack entries for the program tests. */
import assert from 'node:assert/strict';
import { formatIp } from '../../../netip/index.js';
import { CtTimeout } from '../constants.js';
import type { CtEntryValue, DatapathEvent } from '../layout.js';
import { IpProto, readIpv4, readTransport } from './packets.js';

/** What a test says about one event; addresses as text. */
export type EventExpectation = Partial<Omit<DatapathEvent, 'saddr' | 'daddr' | 'tsNs'>> & { saddr?: string; daddr?: string };

/** The events, in order, each holding every field its expectation names. */
export function assertEvents(events: readonly DatapathEvent[], expected: readonly EventExpectation[]): void {
  const show = (e: DatapathEvent): string =>
    `type=${e.type} subtype=${e.subtype} dir=${e.direction} cookie=${e.cookie} ${formatIp(e.saddr)}:${e.sport}->${formatIp(e.daddr)}:${e.dport}`;
  assert.equal(events.length, expected.length, `expected ${expected.length} events, got:\n${events.map(show).join('\n')}`);
  expected.forEach((want, i) => {
    const got = events[i]!;
    const actual: Record<string, unknown> = { ...got, saddr: formatIp(got.saddr), daddr: formatIp(got.daddr) };
    for (const [k, v] of Object.entries(want)) assert.deepEqual(actual[k], v, `event ${i} (${show(got)}): ${k}`);
  });
}

/** Nanoseconds of a CT lifetime given in seconds. */
export function lifetimeNs(seconds: number): bigint {
  return BigInt(seconds) * 1_000_000_000n;
}

/**
 * The entry expires `seconds` after a time between `before` and now
 * (bpf_ktime_get_ns and process.hrtime share CLOCK_MONOTONIC).
 */
export function assertLifetime(entry: CtEntryValue, seconds: number, before: bigint): void {
  const now = process.hrtime.bigint();
  const ns = lifetimeNs(seconds);
  assert.ok(entry.expiresNs >= before + ns && entry.expiresNs <= now + ns, `expires ${entry.expiresNs} not ${seconds} s after [${before}, ${now}]`);
}

export { CtTimeout };

/** The addresses and ports of an IPv4 frame a program sent on, after asserting both checksums hold. */
export function checkedTuple(frame: Uint8Array): { src: string; dst: string; sport: number; dport: number } {
  const ip = readIpv4(frame);
  const l4 = readTransport(frame);
  assert.ok(ip.checksumValid, 'IPv4 header checksum');
  assert.ok(l4.checksumValid, `${l4.proto === IpProto.TCP ? 'TCP' : l4.proto === IpProto.UDP ? 'UDP' : 'ICMP'} checksum`);
  return { src: ip.src, dst: ip.dst, sport: l4.sport, dport: l4.dport };
}
