/**
 * Ring buffer record → MonitorEvent: decoded with the contract's codec
 * (layout.ts datapathEvent), then resolved against what the agent knows now.
 */
import { DropReason, dropReasonName, EventType, PolicyVerdict, ReservedCookie, TracePoint, TrafficDirection } from '../datapath/bpf/constants.js';
import { datapathEvent, type DatapathEvent, EVENT_SIZE } from '../datapath/bpf/layout.js';
import type { RuleCookieIndex } from '../datapath/bpf/ruleCookie.js';
import { formatIp } from '../netip/index.js';
import type { RuleOrigin } from '../policy/index.js';
import { describeCookie, describeDefaultDeny } from './ruleText.js';
import type { MonitorDirection, MonitorEvent, MonitorEventType, MonitorPeer, MonitorRule, MonitorTracePoint, MonitorVerdict } from './types.js';

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
  /** The pod behind a local endpoint, when it has one. */
  endpointPod?(endpointId: number): { namespace: string; name: string } | undefined;
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

const TYPE_NAMES: Record<number, MonitorEventType> = { [EventType.DROP]: 'drop', [EventType.POLICY_VERDICT]: 'policy-verdict', [EventType.TRACE]: 'trace' };
const VERDICT_NAMES: Record<number, MonitorVerdict> = {
  [PolicyVerdict.ALLOWED]: 'allowed',
  [PolicyVerdict.DENIED]: 'denied',
  [PolicyVerdict.NO_MATCH]: 'no-match',
  [PolicyVerdict.WOULD_DROP]: 'would-drop',
  [PolicyVerdict.WOULD_ALLOW]: 'would-allow',
  [PolicyVerdict.AUDIT]: 'audit',
};
/** Verdicts whose cookie NONE means no entry matched: a default deny (of the staged view for WOULD_DROP). */
const REFUSALS = new Set<number>([PolicyVerdict.NO_MATCH, PolicyVerdict.WOULD_DROP, PolicyVerdict.AUDIT]);
const TRACE_NAMES: Record<number, MonitorTracePoint> = {
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
const PROTOCOLS: Record<number, string> = { 1: 'icmp', 6: 'tcp', 17: 'udp', 58: 'icmpv6', 132: 'sctp' };
const TCP_FLAGS: Array<[number, string]> = [
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
const POLICY_DROPS = new Set<number>([Math.abs(DropReason.POLICY.code), Math.abs(DropReason.POLICY_DENY.code)]);

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

/** The resolved event; undefined for an event type this agent does not know. */
export function resolveEvent(e: DatapathEvent, ctx: MonitorContext, nowMonoNs?: bigint, nowWallMs?: number): MonitorEvent | undefined {
  const type = TYPE_NAMES[e.type];
  if (type === undefined) return undefined;
  // Object literals of a fixed shape each (no conditional spreads): this runs twice for every event the agent records.
  const peer = (endpoint: number, identity: number, ip: string, port: number): MonitorPeer => {
    const labels = ctx.identityLabels(identity) ?? NO_LABELS;
    if (endpoint === 0) return { identity, labels, ip, port };
    const pod = ctx.endpointPod?.(endpoint);
    return pod === undefined ? { endpoint, identity, labels, ip, port } : { endpoint, pod: { namespace: pod.namespace, name: pod.name }, identity, labels, ip, port };
  };
  const out: MonitorEvent = {
    type,
    time: wallClockOf(e.tsNs, nowMonoNs, nowWallMs).toISOString(),
    direction: directionOf(e.direction),
    source: peer(e.srcEndpoint, e.srcIdentity, formatIp(e.saddr), e.sport),
    destination: peer(e.dstEndpoint, e.dstIdentity, formatIp(e.daddr), e.dport),
    protocol: protocolName(e.proto),
    interface: { ifindex: e.ifindex },
    length: e.origLen,
  };
  const ifName = e.ifindex === 0 ? undefined : ctx.interfaceName(e.ifindex);
  if (ifName !== undefined) out.interface.name = ifName;
  if (e.proto === 6) out.tcpFlags = TCP_FLAG_LISTS[e.tcpFlags & 0xff]!;
  if (e.service !== 0) {
    const name = ctx.serviceName?.(e.service);
    out.service = { id: e.service, ...(name !== undefined ? { name } : {}) };
  }
  if (type === 'drop') {
    const name = dropReasonName(e.subtype);
    out.drop = { reason: name ?? `UNKNOWN_${e.subtype}`, code: e.subtype, text: name ? DropReason[name].text : `unknown drop reason ${e.subtype}` };
    if (POLICY_DROPS.has(e.subtype)) out.rule = e.subtype === Math.abs(DropReason.POLICY.code) ? defaultDenyRule(e, ctx) : cookieRule(e.cookie, ctx);
  } else if (type === 'policy-verdict') {
    const verdict = VERDICT_NAMES[e.subtype];
    if (verdict !== undefined) out.verdict = verdict;
    out.rule = REFUSALS.has(e.subtype) && e.cookie === ReservedCookie.NONE ? defaultDenyRule(e, ctx, e.subtype === PolicyVerdict.WOULD_DROP) : cookieRule(e.cookie, ctx);
  } else {
    const point = TRACE_NAMES[e.subtype];
    if (point !== undefined) out.tracePoint = point;
  }
  return out;
}

/** A no-match decision, named by the rules of the enforcing endpoint (the source for egress, the destination for ingress), of its staged view with `staged`. */
function defaultDenyRule(e: DatapathEvent, ctx: MonitorContext, staged = false) {
  const egress = e.direction === TrafficDirection.EGRESS;
  const endpoint = egress ? e.srcEndpoint : e.dstEndpoint;
  const by = endpoint === 0 ? undefined : ctx.enforcedBy?.(endpoint, egress ? 'egress' : 'ingress', staged);
  if (by === undefined) return cookieRule(e.cookie, ctx);
  let rule = defaultDenyRules.get(by);
  if (rule === undefined) {
    rule = describeDefaultDeny(by);
    defaultDenyRules.set(by, rule);
  }
  return rule;
}

/*
 * The rule objects events share, so that an event costs no text built and no
 * origins copied: per cookie index (a new one comes with each policy
 * revision, so a rule changed since is never described by its old text),
 * and per list of enforcing rules (the policy engine keeps one per
 * endpoint's direction until it recomputes it). Events never change them.
 */
const cookieRules = new WeakMap<RuleCookieIndex, Map<number, MonitorRule>>();
const defaultDenyRules = new WeakMap<readonly RuleOrigin[], MonitorRule>();

function cookieRule(cookie: number, ctx: MonitorContext): MonitorRule {
  const index = ctx.ruleIndex();
  let rules = cookieRules.get(index);
  if (rules === undefined) {
    rules = new Map();
    cookieRules.set(index, rules);
  }
  let rule = rules.get(cookie);
  if (rule === undefined) {
    rule = describeCookie(cookie, index);
    // Unknown cookies are as many as a stale map holds; their texts are not worth keeping.
    if (rule.origins.length > 0 || rules.size < 4096) rules.set(cookie, rule);
  }
  return rule;
}
