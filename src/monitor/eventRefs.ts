/**
 * What a record's numbers mean, taken when the record is read and kept with
 * it: the peers' identity labels and pods, the interface's and the service's
 * names, and the rule that decided. Each is a reference to an object the
 * agent keeps anyway (one labels array per identity, one pod per endpoint,
 * one rule per cookie and policy revision), so taking them allocates
 * nothing. A flow held for an hour is then still told as it happened (its
 * pod deleted since, its endpoint number reused, its policy changed), while
 * its text is built only when someone reads it: the agent records every
 * event, and people read few of them.
 *
 * A record's header (the numbers these come from) is read in place, each
 * member at the offset the contract's layout gives, into an object the
 * reader reuses.
 */
import { DropReason, EventType, PolicyVerdict, ReservedCookie, TrafficDirection } from '../datapath/bpf/constants.js';
import { type DatapathEvent, EVENT_SIZE, eventFields } from '../datapath/bpf/layout.js';
import type { RuleCookieIndex } from '../datapath/bpf/ruleCookie.js';
import type { RuleOrigin } from '../policy/index.js';
import { describeCookie, describeDefaultDeny } from './ruleText.js';
import type { MonitorContext } from './decode.js';
import type { MonitorEventType, MonitorRule } from './types.js';

export const EVENT_TYPE_NAMES: Readonly<Record<number, MonitorEventType>> = { [EventType.DROP]: 'drop', [EventType.POLICY_VERDICT]: 'policy-verdict', [EventType.TRACE]: 'trace' };

/** The numbers of a record that say what it means (and which flow it is part of). */
export type RecordHeader = Pick<DatapathEvent, 'type' | 'subtype' | 'direction' | 'ifindex' | 'srcIdentity' | 'dstIdentity' | 'srcEndpoint' | 'dstEndpoint' | 'cookie' | 'service'>;

export function newRecordHeader(): RecordHeader {
  return { type: 0, subtype: 0, direction: 0, ifindex: 0, srcIdentity: 0, dstIdentity: 0, srcEndpoint: 0, dstEndpoint: 0, cookie: 0, service: 0 };
}

const F = eventFields;

/** Reads a record's header into `into`; false for a record too short or of a type this agent does not know. */
export function readRecordHeader(record: Buffer, into: RecordHeader): boolean {
  if (record.length < EVENT_SIZE) return false;
  into.type = F.type.codec.read(record, F.type.offset);
  if (EVENT_TYPE_NAMES[into.type] === undefined) return false;
  into.subtype = F.subtype.codec.read(record, F.subtype.offset);
  into.direction = F.direction.codec.read(record, F.direction.offset);
  into.ifindex = F.ifindex.codec.read(record, F.ifindex.offset);
  into.srcIdentity = F.srcIdentity.codec.read(record, F.srcIdentity.offset);
  into.dstIdentity = F.dstIdentity.codec.read(record, F.dstIdentity.offset);
  into.srcEndpoint = F.srcEndpoint.codec.read(record, F.srcEndpoint.offset);
  into.dstEndpoint = F.dstEndpoint.codec.read(record, F.dstEndpoint.offset);
  into.cookie = F.cookie.codec.read(record, F.cookie.offset);
  into.service = F.service.codec.read(record, F.service.offset);
  return true;
}

/** The pod behind a local endpoint. The context hands out one object per endpoint: refs hold it, never a copy. */
export interface PodRef {
  readonly namespace: string;
  readonly name: string;
}

export interface EventRefs {
  srcLabels: readonly string[] | undefined;
  dstLabels: readonly string[] | undefined;
  srcPod: PodRef | undefined;
  dstPod: PodRef | undefined;
  ifName: string | undefined;
  /** Policy drops and verdicts: the rule that decided. */
  rule: MonitorRule | undefined;
  serviceName: string | undefined;
}

export function newEventRefs(): EventRefs {
  return { srcLabels: undefined, dstLabels: undefined, srcPod: undefined, dstPod: undefined, ifName: undefined, rule: undefined, serviceName: undefined };
}

export function copyEventRefs(from: Readonly<EventRefs>, into: EventRefs): void {
  into.srcLabels = from.srcLabels;
  into.dstLabels = from.dstLabels;
  into.srcPod = from.srcPod;
  into.dstPod = from.dstPod;
  into.ifName = from.ifName;
  into.rule = from.rule;
  into.serviceName = from.serviceName;
}

const POLICY_DROPS = new Set<number>([Math.abs(DropReason.POLICY.code), Math.abs(DropReason.POLICY_DENY.code)]);
/** Verdicts whose cookie NONE means no entry matched: a default deny (of the staged view for WOULD_DROP). */
const REFUSALS = new Set<number>([PolicyVerdict.NO_MATCH, PolicyVerdict.WOULD_DROP, PolicyVerdict.AUDIT]);

/** What the header's numbers mean now, into `into` (returned). */
export function captureRefs(h: Readonly<RecordHeader>, ctx: MonitorContext, into: EventRefs): EventRefs {
  into.srcLabels = ctx.identityLabels(h.srcIdentity);
  into.dstLabels = ctx.identityLabels(h.dstIdentity);
  into.srcPod = h.srcEndpoint === 0 ? undefined : ctx.endpointPod?.(h.srcEndpoint);
  into.dstPod = h.dstEndpoint === 0 ? undefined : ctx.endpointPod?.(h.dstEndpoint);
  into.ifName = h.ifindex === 0 ? undefined : ctx.interfaceName(h.ifindex);
  into.serviceName = h.service === 0 ? undefined : ctx.serviceName?.(h.service);
  into.rule = undefined;
  if (h.type === EventType.DROP) {
    if (POLICY_DROPS.has(h.subtype)) into.rule = h.subtype === Math.abs(DropReason.POLICY.code) ? defaultDenyRule(h, ctx) : cookieRule(h.cookie, ctx);
  } else if (h.type === EventType.POLICY_VERDICT) {
    into.rule = REFUSALS.has(h.subtype) && h.cookie === ReservedCookie.NONE ? defaultDenyRule(h, ctx, h.subtype === PolicyVerdict.WOULD_DROP) : cookieRule(h.cookie, ctx);
  }
  return into;
}

/** A no-match decision, named by the rules of the enforcing endpoint (the source for egress, the destination for ingress), of its staged view with `staged`. */
function defaultDenyRule(h: Readonly<RecordHeader>, ctx: MonitorContext, staged = false): MonitorRule {
  const egress = h.direction === TrafficDirection.EGRESS;
  const endpoint = egress ? h.srcEndpoint : h.dstEndpoint;
  const by = endpoint === 0 ? undefined : ctx.enforcedBy?.(endpoint, egress ? 'egress' : 'ingress', staged);
  if (by === undefined) return cookieRule(h.cookie, ctx);
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
