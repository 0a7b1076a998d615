/**
 * Numbers shared by the eBPF programs (bpf/) and TypeScript. This file is the
 * one definition: `renderDatapathHeader()` writes build/bpf/include/
 * tendril_constants.h at build time (scripts/gen-bpf-headers.mjs), and the C
 * side includes that, never a hand-typed copy.
 */

/**
 * Why a packet was dropped, as the negative codes the programs return to
 * their callers and put in drop events and metrics (as the positive number).
 * Numbers follow Cilium's DROP_* where one exists, so they read the same.
 */
export const DropReason = {
  INVALID_SOURCE: { code: -132, text: 'source address is not the endpoint\'s own' },
  POLICY: { code: -133, text: 'policy denied: no rule allows this flow' },
  INVALID_PACKET: { code: -134, text: 'malformed or truncated packet' },
  CT_INVALID_HEADER: { code: -135, text: 'L4 header too short for connection tracking' },
  UNKNOWN_L3: { code: -139, text: 'unsupported L3 protocol (IPv6 is not enforced yet)' },
  WRITE_ERROR: { code: -141, text: 'failed to rewrite the packet' },
  UNKNOWN_ENDPOINT: { code: -150, text: 'destination is a pod address with no local endpoint' },
  TTL_EXCEEDED: { code: -151, text: 'TTL exceeded on local delivery' },
  FRAG_NOT_FOUND: { code: -157, text: 'IP fragment whose first fragment was not seen' },
  NO_CONFIG: { code: -160, text: 'datapath configuration missing' },
  ARP_INVALID: { code: -161, text: 'malformed ARP packet' },
  POLICY_DENY: { code: -181, text: 'policy denied by a deny rule' },
} as const satisfies Record<string, { code: number; text: string }>;

export type DropReasonName = keyof typeof DropReason;

const dropByCode = new Map<number, DropReasonName>(Object.entries(DropReason).map(([name, r]) => [Math.abs(r.code), name as DropReasonName]));

/** The reason behind a drop code as events and metrics carry it (positive, or the negative return value). */
export function dropReasonName(code: number): DropReasonName | undefined {
  return dropByCode.get(Math.abs(code));
}

/**
 * Metrics reasons besides 0 (forwarded) and the drop codes: events the ring
 * buffer could not take (the reader was behind), counted per packet whose
 * event was lost, so `tendril bpf metrics` shows what the monitor missed.
 */
export const MetricsReason = {
  FORWARDED: 0,
  EVENTS_LOST: 255,
} as const;

/** Event record types in the `tendril_events` ring buffer. */
export const EventType = {
  DROP: 1,
  POLICY_VERDICT: 2,
  TRACE: 3,
} as const;

/** Where a trace event was observed (the `subtype` of a TRACE event). */
export const TracePoint = {
  /** Delivered straight into a local pod (bpf_redirect_peer). */
  TO_ENDPOINT: 1,
  /** Handed to the node's stack (to the node itself, or routed onwards). */
  TO_STACK: 2,
  /** Arrived at a pod's interface from the node's stack. */
  FROM_STACK: 3,
  /** Seen on the host device pair (tendril_host / tendril_net). */
  FROM_HOST: 4,
  TO_HOST: 5,
} as const;

/** Direction of traffic relative to the endpoint in events and metrics (0 = not endpoint-relative). */
export const TrafficDirection = {
  NONE: 0,
  INGRESS: 1,
  EGRESS: 2,
} as const;

/** The `subtype` of a POLICY_VERDICT event. */
export const PolicyVerdict = {
  ALLOWED: 1,
  /** An entry with the deny flag matched. */
  DENIED: 2,
  /** No entry matched: default deny. */
  NO_MATCH: 3,
} as const;

/** Rule cookies with a meaning of their own; every other cookie is a rule's (ruleCookie()). */
export const ReservedCookie = {
  /** No rule decided (no entry matched). */
  NONE: 0,
  /** The direction is not enforced on the endpoint: allow-all. */
  NOT_ENFORCED: 1,
  /** The host may always reach its endpoints. */
  ALLOW_LOCALHOST: 2,
} as const;
/** Cookies below this are reserved. */
export const MIN_RULE_COOKIE = 16;

/** Trace levels of the datapath config. */
export const TraceLevel = {
  OFF: 0,
  /** A trace for the first packet of each new connection. */
  NEW_FLOWS: 1,
  /** A trace for every packet (debugging; costs throughput). */
  ALL: 2,
} as const;

/** Conntrack lifetimes, Cilium's defaults, in seconds. */
export const CtTimeout = {
  TCP_SYN: 60,
  TCP_ESTABLISHED: 21600,
  TCP_CLOSING: 10,
  ANY: 60,
} as const;

/** Flags of a conntrack entry. */
export const CtFlag = {
  /** A packet in the reply direction was seen. */
  REPLY_SEEN: 1 << 0,
  /** FIN or RST seen: the short closing lifetime applies. */
  CLOSING: 1 << 1,
} as const;

/** Flags of a local endpoint map entry. */
export const EndpointFlag = {
  /** An address of the node itself (router address), not a pod. */
  HOST: 1 << 0,
} as const;

/** The pinned maps, by name (pinned at <bpffs root>/tendril/<name>). */
export const MapName = {
  ENDPOINTS: 'tendril_lxc',
  IPCACHE: 'tendril_ipcache',
  POLICY: 'tendril_policy',
  CT_TCP: 'tendril_ct4_tcp',
  CT_ANY: 'tendril_ct4_any',
  FRAG: 'tendril_frag4',
  METRICS: 'tendril_metrics',
  EVENTS: 'tendril_events',
  CONFIG: 'tendril_config',
} as const;
export type MapNameValue = (typeof MapName)[keyof typeof MapName];

/** Default map sizes (Cilium's where it has one); the agent's --bpf-*-max flags override them. */
export const DefaultMapSize = {
  [MapName.ENDPOINTS]: 65535,
  [MapName.IPCACHE]: 512000,
  /** One trie for every endpoint's entries (LPM, allocated on use); each endpoint is capped by the engine. */
  [MapName.POLICY]: 1 << 22,
  [MapName.CT_TCP]: 1 << 19,
  [MapName.CT_ANY]: 1 << 18,
  [MapName.FRAG]: 8192,
  [MapName.METRICS]: 1024,
  /** Bytes, a power of two. */
  [MapName.EVENTS]: 1 << 22,
  [MapName.CONFIG]: 1,
} as const satisfies Record<MapNameValue, number>;

/** Bits of a policy key before (protocol, port): endpoint ID, peer identity, direction. */
export const POLICY_KEY_FIXED_BITS = 72;
/** Bits of (protocol, port) in a policy key. */
export const POLICY_KEY_L4_BITS = 24;
/** Bits of an ipcache key before the address: padding and family. */
export const IPCACHE_KEY_FIXED_BITS = 32;

function macro(name: string): string {
  return name.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase();
}

function define(name: string, value: number | string): string {
  return `#define ${name.padEnd(36)} ${value}`;
}

/** C source for tendril_constants.h, generated from the constants above. */
export function renderDatapathHeader(): string {
  const lines = [
    '/* SPDX-License-Identifier: Apache-2.0 */',
    '/* Generated from src/datapath/bpf/constants.ts by renderDatapathHeader(); do not edit. */',
    '#ifndef __TENDRIL_CONSTANTS_H_',
    '#define __TENDRIL_CONSTANTS_H_',
    '',
  ];
  for (const [name, r] of Object.entries(DropReason)) lines.push(`/* ${r.text} */`, define(`DROP_${name}`, `(${r.code})`));
  lines.push('');
  const groups: Array<[string, Record<string, number>]> = [
    ['METRICS_REASON', MetricsReason],
    ['EVENT', EventType],
    ['TRACE', TracePoint],
    ['DIR', TrafficDirection],
    ['VERDICT', PolicyVerdict],
    ['COOKIE', ReservedCookie],
    ['TRACE_LEVEL', TraceLevel],
    ['CT_TIMEOUT', CtTimeout],
    ['CT_F', CtFlag],
    ['ENDPOINT_F', EndpointFlag],
  ];
  for (const [prefix, table] of groups) {
    for (const [name, value] of Object.entries(table)) lines.push(define(`${prefix}_${macro(name)}`, value));
    lines.push('');
  }
  for (const [name, value] of Object.entries(DefaultMapSize)) lines.push(define(`${name.toUpperCase()}_DEFAULT_SIZE`, value));
  lines.push(
    define('MIN_RULE_COOKIE', MIN_RULE_COOKIE),
    define('POLICY_KEY_FIXED_BITS', POLICY_KEY_FIXED_BITS),
    define('POLICY_KEY_L4_BITS', POLICY_KEY_L4_BITS),
    define('IPCACHE_KEY_FIXED_BITS', IPCACHE_KEY_FIXED_BITS),
    '',
    '#endif',
    '',
  );
  return lines.join('\n');
}
