/**
 * Tests of the flow history write events as the datapath would: a
 * MonitorEvent (the readable form tests are written in) becomes the record
 * the kernel would have written, and its names the refs the hub would have
 * taken, so a FlowRing reads back the same event. The ring's clock is fixed
 * (FIXED_FLOW_CLOCK), so times come back to the millisecond.
 */
import { EventType, TrafficDirection } from '../../datapath/bpf/constants.js';
import { datapathEvent } from '../../datapath/bpf/layout.js';
import { encode } from '../../datapath/kernel/bpf/codec.js';
import {
  EVENT_TYPE_NAMES,
  type MonitorEvent,
  newEventRefs,
  newRecordHeader,
  PROTOCOLS,
  readRecordHeader,
  TCP_FLAGS,
  TRACE_NAMES,
  VERDICT_NAMES,
} from '../../monitor/index.js';
import { parseIp } from '../../netip/index.js';
import type { FlowClock, FlowRing } from '../flowRing.js';

const MONO_NS = 10n ** 18n;
const WALL_MS = Date.parse('2040-01-01T00:00:00.000Z');

/** A clock that stands still: a record's time reads back exactly as written. */
export const FIXED_FLOW_CLOCK: FlowClock = { monoNs: () => MONO_NS, wallMs: () => WALL_MS };

function codeOf<T>(names: Readonly<Record<number, T>>, name: T | undefined, what: string): number {
  for (const [code, n] of Object.entries(names)) if (n === name) return Number(code);
  throw new Error(`no ${what} code for ${String(name)}`);
}

const DIRECTION_CODES = { ingress: TrafficDirection.INGRESS, egress: TrafficDirection.EGRESS, none: TrafficDirection.NONE } as const;

/** The record and refs of an event (times against FIXED_FLOW_CLOCK). */
export function recordOf(e: MonitorEvent): { record: Buffer; refs: ReturnType<typeof newEventRefs> } {
  const type = codeOf(EVENT_TYPE_NAMES, e.type, 'event type');
  const subtype =
    type === EventType.DROP ? e.drop!.code : type === EventType.POLICY_VERDICT ? codeOf(VERDICT_NAMES, e.verdict, 'verdict') : codeOf(TRACE_NAMES, e.tracePoint, 'trace point');
  const record = encode(datapathEvent, {
    type,
    subtype,
    direction: DIRECTION_CODES[e.direction],
    proto: codeOf(PROTOCOLS, e.protocol, 'protocol'),
    tcpFlags: TCP_FLAGS.filter(([, name]) => e.tcpFlags?.includes(name)).reduce((bits, [bit]) => bits | bit, 0),
    service: e.service?.id ?? 0,
    ifindex: e.interface.ifindex,
    srcIdentity: e.source.identity,
    dstIdentity: e.destination.identity,
    srcEndpoint: e.source.endpoint ?? 0,
    dstEndpoint: e.destination.endpoint ?? 0,
    cookie: e.rule?.cookie ?? 0,
    origLen: e.length,
    sport: e.source.port,
    dport: e.destination.port,
    saddr: parseIp(e.source.ip),
    daddr: parseIp(e.destination.ip),
    tsNs: MONO_NS - BigInt(WALL_MS - Date.parse(e.time)) * 1_000_000n,
  });
  const refs = newEventRefs();
  refs.srcLabels = e.source.labels;
  refs.dstLabels = e.destination.labels;
  refs.srcPod = e.source.pod;
  refs.dstPod = e.destination.pod;
  refs.ifName = e.interface.name;
  refs.rule = e.rule;
  refs.serviceName = e.service?.name;
  return { record, refs };
}

/** Records an event into a ring as the hub would. */
export function recordEvent(ring: FlowRing, e: MonitorEvent): void {
  const { record, refs } = recordOf(e);
  const header = newRecordHeader();
  if (!readRecordHeader(record, header)) throw new Error('the record written is not one the hub would read');
  ring.record(record, header, refs);
}
