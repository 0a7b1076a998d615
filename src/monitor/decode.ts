/**
 * Ring buffer record → MonitorEvent: decoded with the contract's codec
 * (layout.ts datapathEvent), and told with what its numbers meant when it
 * was read (eventRefs.ts): now, for a live event; when it happened, for one
 * the flow history kept.
 */
import { DropReason, dropReasonName, PolicyVerdict, TracePoint, TrafficDirection } from '../datapath/bpf/constants.js';
import { datapathEvent, type DatapathEvent, EVENT_SIZE } from '../datapath/bpf/layout.js';
import type { RuleCookieIndex } from '../datapath/bpf/ruleCookie.js';
import { formatIp } from '../netip/index.js';
import type { RuleOrigin } from '../policy/index.js';
import { captureRefs, EVENT_TYPE_NAMES, type EventRefs, newEventRefs, type PodRef } from './eventRefs.js';
import type { MonitorDirection, MonitorEvent, MonitorPeer, MonitorTracePoint, MonitorVerdict } from './types.js';

/** What resolving an event needs from the agent. */
export interface MonitorContext {
  /** An identity's labels, or undefined when unknown; events hold the array as given (one per identity, not copied per event). */
  identityLabels(identity: number): readonly string[] | undefined;
  /** An interface's name, or undefined when there is none by that index (or it is not known yet). */
  interfaceName(ifindex: number): string | undefined;
  /** Lists the interfaces again now (for a listing that may name devices created since the last one). */
  refreshInterfaces?(): Promise<void>;
  /** Rule cookies of the current policies. */
  ruleIndex(): RuleCookieIndex;
  /** The rules that put an endpoint's direction into default deny (undefined when the endpoint is unknown); in its staged view with `staged`. */
  enforcedBy?(endpointId: number, direction: 'ingress' | 'egress', staged?: boolean): readonly RuleOrigin[] | undefined;
  /** The pod behind a local endpoint, when it has one: one object per endpoint (events hold it, not a copy). */
  endpointPod?(endpointId: number): PodRef | undefined;
  /** A service's `namespace/name` by its ID, when it exists. */
  serviceName?(id: number): string | undefined;
}

/** A ring buffer record as the contract's struct; undefined for a record too short or of an unknown family. */
export function decodeRecord(record: Buffer): DatapathEvent | undefined {
  if (record.length < EVENT_SIZE) return undefined;
  try {
    return datapathEvent.read(record, 0);
  } catch {
    return undefined;
  }
}

/** The names of the codes a record carries (also read backwards, by tests that write records). */
export const VERDICT_NAMES: Readonly<Record<number, MonitorVerdict>> = {
  [PolicyVerdict.ALLOWED]: 'allowed',
  [PolicyVerdict.DENIED]: 'denied',
  [PolicyVerdict.NO_MATCH]: 'no-match',
  [PolicyVerdict.WOULD_DROP]: 'would-drop',
  [PolicyVerdict.WOULD_ALLOW]: 'would-allow',
  [PolicyVerdict.AUDIT]: 'audit',
};
export const TRACE_NAMES: Readonly<Record<number, MonitorTracePoint>> = {
  [TracePoint.TO_ENDPOINT]: 'to-endpoint',
  [TracePoint.TO_STACK]: 'to-stack',
  [TracePoint.FROM_STACK]: 'from-stack',
  [TracePoint.FROM_HOST]: 'from-host',
  [TracePoint.TO_HOST]: 'to-host',
  [TracePoint.FROM_NETWORK]: 'from-network',
  [TracePoint.TO_NETWORK]: 'to-network',
  [TracePoint.TO_OVERLAY]: 'to-overlay',
  [TracePoint.FROM_OVERLAY]: 'from-overlay',
};
export const PROTOCOLS: Readonly<Record<number, string>> = { 1: 'icmp', 6: 'tcp', 17: 'udp', 58: 'icmpv6', 132: 'sctp' };
export const TCP_FLAGS: ReadonlyArray<readonly [number, string]> = [
  [0x02, 'SYN'],
  [0x10, 'ACK'],
  [0x01, 'FIN'],
  [0x04, 'RST'],
  [0x08, 'PSH'],
  [0x20, 'URG'],
];
/** Every flags byte's names, one frozen array each, shared by the events (never changed in place). */
const TCP_FLAG_LISTS: ReadonlyArray<readonly string[]> = Array.from({ length: 256 }, (_, b) => Object.freeze(tcpFlagNames(b)));
/** An unknown identity's labels, one array for all. */
const NO_LABELS: readonly string[] = Object.freeze([]);

export function directionOf(d: number): MonitorDirection {
  return d === TrafficDirection.INGRESS ? 'ingress' : d === TrafficDirection.EGRESS ? 'egress' : 'none';
}

export function protocolName(proto: number): string {
  return PROTOCOLS[proto] ?? String(proto);
}

export function tcpFlagNames(flags: number): string[] {
  return TCP_FLAGS.filter(([bit]) => (flags & bit) !== 0).map(([, name]) => name);
}

/** The wall-clock time of a bpf_ktime_get_ns() (CLOCK_MONOTONIC) timestamp. */
export function wallClockOf(tsNs: bigint, nowMonoNs: bigint = process.hrtime.bigint(), nowWallMs: number = Date.now()): Date {
  return new Date(nowWallMs - Number((nowMonoNs - tsNs) / 1_000_000n));
}

/** The verdict's name of a policy verdict's subtype. */
export function verdictName(subtype: number): MonitorVerdict | undefined {
  return VERDICT_NAMES[subtype];
}

/** The resolved event, what its numbers mean now; undefined for an event type this agent does not know. */
export function resolveEvent(e: DatapathEvent, ctx: MonitorContext, nowMonoNs?: bigint, nowWallMs?: number): MonitorEvent | undefined {
  if (EVENT_TYPE_NAMES[e.type] === undefined) return undefined;
  return buildEvent(e, captureRefs(e, ctx, newEventRefs()), nowMonoNs, nowWallMs);
}

/** The event of a record of a known type, with what its numbers meant when it was read (`refs`, captureRefs). */
export function buildEvent(e: DatapathEvent, refs: Readonly<EventRefs>, nowMonoNs?: bigint, nowWallMs?: number): MonitorEvent {
  const type = EVENT_TYPE_NAMES[e.type]!;
  // Object literals of a fixed shape each (no conditional spreads): this runs for every event read.
  const peer = (endpoint: number, identity: number, labels: readonly string[] | undefined, pod: PodRef | undefined, ip: string, port: number): MonitorPeer => {
    if (endpoint === 0) return { identity, labels: labels ?? NO_LABELS, ip, port };
    return pod === undefined ? { endpoint, identity, labels: labels ?? NO_LABELS, ip, port } : { endpoint, pod: { namespace: pod.namespace, name: pod.name }, identity, labels: labels ?? NO_LABELS, ip, port };
  };
  const out: MonitorEvent = {
    type,
    time: wallClockOf(e.tsNs, nowMonoNs, nowWallMs).toISOString(),
    direction: directionOf(e.direction),
    source: peer(e.srcEndpoint, e.srcIdentity, refs.srcLabels, refs.srcPod, formatIp(e.saddr), e.sport),
    destination: peer(e.dstEndpoint, e.dstIdentity, refs.dstLabels, refs.dstPod, formatIp(e.daddr), e.dport),
    protocol: protocolName(e.proto),
    interface: { ifindex: e.ifindex },
    length: e.origLen,
  };
  if (refs.ifName !== undefined) out.interface.name = refs.ifName;
  if (e.proto === 6) out.tcpFlags = TCP_FLAG_LISTS[e.tcpFlags & 0xff]!;
  if (e.service !== 0) out.service = refs.serviceName !== undefined ? { id: e.service, name: refs.serviceName } : { id: e.service };
  if (refs.rule !== undefined) out.rule = refs.rule;
  if (type === 'drop') {
    const name = dropReasonName(e.subtype);
    out.drop = { reason: name ?? `UNKNOWN_${e.subtype}`, code: e.subtype, text: name ? DropReason[name].text : `unknown drop reason ${e.subtype}` };
  } else if (type === 'policy-verdict') {
    const verdict = VERDICT_NAMES[e.subtype];
    if (verdict !== undefined) out.verdict = verdict;
  } else {
    const point = TRACE_NAMES[e.subtype];
    if (point !== undefined) out.tracePoint = point;
  }
  return out;
}
