/**
 * Which flows a reader wants, in Hubble's terms: criteria on either side of a
 * flow (`pod`, `namespace`, `label`, `identity`, `ip`, `port`, `service`), on
 * its source (`from-…`) or its destination (`to-…`), and on the flow itself
 * (`verdict`, `protocol`, `type`, `node`, `since`, `until`). Several values
 * of one criterion are alternatives; different criteria must all hold.
 *
 * The same parameters come from `tendril observe`'s options, from the query
 * of GET /v1/flows and from the relay's clients, so parsing lives here once:
 * outside input, refused with a FlowFilterError naming the bad value.
 */
import { MONITOR_EVENT_TYPES, type MonitorEvent, type MonitorEventType, type MonitorPeer } from '../monitor/index.js';
import { type IpAddress, type IpPrefix, prefixContainsIp, tryParseIp, tryParsePrefix } from '../netip/index.js';
import { peerNamespace } from './peer.js';
import { FLOW_VERDICTS, type Flow, type FlowVerdict } from './types.js';

export class FlowFilterError extends Error {
  override readonly name = 'FlowFilterError';
}

/** Criteria on one side of a flow. */
export interface PeerFilter {
  /** `namespace/name-prefix`, or a name prefix in any namespace. */
  pods?: Array<{ namespace?: string; namePrefix: string }>;
  namespaces?: string[];
  /** `[source:]key[=value]`: without a source, any source's label of that key. */
  labels?: Array<{ source?: string; key: string; value?: string }>;
  identities?: number[];
  ips?: IpPrefix[];
  ports?: number[];
  /** `namespace/name`, or a name in any namespace. */
  services?: Array<{ namespace?: string; name: string }>;
}

export interface FlowFilter {
  either?: PeerFilter;
  from?: PeerFilter;
  to?: PeerFilter;
  verdicts?: FlowVerdict[];
  /** Protocol names as events give them (tcp, udp, icmp, icmpv6, sctp). */
  protocols?: string[];
  types?: MonitorEventType[];
  nodes?: string[];
  since?: Date;
  until?: Date;
}

/** The peer criteria, by parameter name (without the `from-`/`to-` prefix). */
export const PEER_FILTER_PARAMS = ['pod', 'namespace', 'label', 'identity', 'ip', 'port', 'service'] as const;
export const FLOW_FILTER_PARAMS = ['verdict', 'protocol', 'type', 'node', 'since', 'until'] as const;
/** Every filter parameter GET /v1/flows and `tendril observe` take. */
export const ALL_FLOW_FILTER_PARAMS: readonly string[] = [
  ...PEER_FILTER_PARAMS.flatMap((p) => [p, `from-${p}`, `to-${p}`]),
  ...FLOW_FILTER_PARAMS,
];

const NAME = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
const PROTOCOLS = ['tcp', 'udp', 'icmp', 'icmpv6', 'sctp'];

type Params = Readonly<Record<string, string | readonly string[] | undefined>>;

function valuesOf(params: Params, name: string): string[] {
  const v = params[name];
  if (v === undefined) return [];
  return (typeof v === 'string' ? [v] : [...v]).flatMap((s) => s.split(',')).map((s) => s.trim()).filter((s) => s !== '');
}

function name(param: string, text: string): string {
  if (!NAME.test(text)) throw new FlowFilterError(`--${param}: "${text}" is not a Kubernetes name (lowercase letters, digits, '-' and '.')`);
  return text;
}

function namespaced(param: string, text: string): { namespace?: string; name: string } {
  const parts = text.split('/');
  if (parts.length > 2) throw new FlowFilterError(`--${param}: "${text}" is not [namespace/]name`);
  if (parts.length === 1) return { name: name(param, parts[0]!) };
  return { namespace: name(param, parts[0]!), name: name(param, parts[1]!) };
}

function integer(param: string, text: string, max: number): number {
  if (!/^\d+$/.test(text) || Number(text) > max) throw new FlowFilterError(`--${param} must be a number from 0 to ${max}, got "${text}"`);
  return Number(text);
}

function label(param: string, text: string): { source?: string; key: string; value?: string } {
  const eq = text.indexOf('=');
  const keyPart = eq < 0 ? text : text.slice(0, eq);
  const value = eq < 0 ? undefined : text.slice(eq + 1);
  const colon = keyPart.indexOf(':');
  const source = colon < 0 ? undefined : keyPart.slice(0, colon);
  const key = colon < 0 ? keyPart : keyPart.slice(colon + 1);
  if (key === '' || /[\s,]/.test(key) || (source !== undefined && !/^[a-z0-9-]+$/.test(source))) throw new FlowFilterError(`--${param}: "${text}" is not [source:]key[=value]`);
  return { ...(source !== undefined ? { source } : {}), key, ...(value !== undefined ? { value } : {}) };
}

function ipOrCidr(param: string, text: string): IpPrefix {
  const p = tryParsePrefix(text, { bareAddress: true });
  if (p === undefined) throw new FlowFilterError(`--${param}: "${text}" is not an IP address or CIDR`);
  return p;
}

function oneOf<T extends string>(param: string, text: string, allowed: readonly T[]): T {
  if (!(allowed as readonly string[]).includes(text)) throw new FlowFilterError(`--${param} must be one of ${allowed.join(', ')}, got "${text}"`);
  return text as T;
}

/** An ISO 8601 time, or a duration back from `now` (`30s`, `10m`, `2h`, `1d`). */
export function parseFlowTime(param: string, text: string, now: Date = new Date()): Date {
  const rel = /^(\d+)(ms|s|m|h|d)$/.exec(text);
  if (rel) {
    const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[rel[2] as 'ms' | 's' | 'm' | 'h' | 'd'];
    return new Date(now.getTime() - Number(rel[1]) * unit);
  }
  const t = /^\d{4}-\d{2}-\d{2}T/.test(text) ? new Date(text) : new Date(NaN);
  if (Number.isNaN(t.getTime())) throw new FlowFilterError(`--${param}: "${text}" is neither an ISO 8601 time (2026-01-02T15:04:05Z) nor a duration back from now (30s, 10m, 2h, 1d)`);
  return t;
}

function peerFilter(params: Params, prefix: '' | 'from-' | 'to-'): PeerFilter | undefined {
  const f: PeerFilter = {};
  const p = (n: string) => `${prefix}${n}`;
  const pods = valuesOf(params, p('pod')).map((t) => {
    const n = namespaced(p('pod'), t);
    return { ...(n.namespace !== undefined ? { namespace: n.namespace } : {}), namePrefix: n.name };
  });
  if (pods.length > 0) f.pods = pods;
  const namespaces = valuesOf(params, p('namespace')).map((t) => name(p('namespace'), t));
  if (namespaces.length > 0) f.namespaces = namespaces;
  const labels = valuesOf(params, p('label')).map((t) => label(p('label'), t));
  if (labels.length > 0) f.labels = labels;
  const identities = valuesOf(params, p('identity')).map((t) => integer(p('identity'), t, 0xffffffff));
  if (identities.length > 0) f.identities = identities;
  const ips = valuesOf(params, p('ip')).map((t) => ipOrCidr(p('ip'), t));
  if (ips.length > 0) f.ips = ips;
  const ports = valuesOf(params, p('port')).map((t) => integer(p('port'), t, 0xffff));
  if (ports.length > 0) f.ports = ports;
  const services = valuesOf(params, p('service')).map((t) => namespaced(p('service'), t));
  if (services.length > 0) f.services = services;
  return Object.keys(f).length > 0 ? f : undefined;
}

/** The filter from parameters (CLI options or a query); throws FlowFilterError on a bad value or an unknown parameter. */
export function parseFlowFilter(params: Params, now: Date = new Date()): FlowFilter {
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && !ALL_FLOW_FILTER_PARAMS.includes(k)) throw new FlowFilterError(`unknown flow filter "${k}"`);
  }
  const f: FlowFilter = {};
  const either = peerFilter(params, '');
  const from = peerFilter(params, 'from-');
  const to = peerFilter(params, 'to-');
  if (either) f.either = either;
  if (from) f.from = from;
  if (to) f.to = to;
  const verdicts = valuesOf(params, 'verdict').map((t) => oneOf('verdict', t, FLOW_VERDICTS));
  if (verdicts.length > 0) f.verdicts = verdicts;
  const protocols = valuesOf(params, 'protocol').map((t) => oneOf('protocol', t.toLowerCase(), PROTOCOLS));
  if (protocols.length > 0) f.protocols = protocols;
  const types = valuesOf(params, 'type').map((t) => oneOf('type', t, MONITOR_EVENT_TYPES));
  if (types.length > 0) f.types = types;
  const nodes = valuesOf(params, 'node').map((t) => name('node', t));
  if (nodes.length > 0) f.nodes = nodes;
  const since = valuesOf(params, 'since');
  const until = valuesOf(params, 'until');
  if (since.length > 1 || until.length > 1) throw new FlowFilterError('--since and --until take one time each');
  if (since[0] !== undefined) f.since = parseFlowTime('since', since[0], now);
  if (until[0] !== undefined) f.until = parseFlowTime('until', until[0], now);
  if (f.since && f.until && f.since > f.until) throw new FlowFilterError(`--since (${f.since.toISOString()}) is after --until (${f.until.toISOString()})`);
  return f;
}

/** The filter as query parameters again (what a relay forwards to each node, and the CLI sends). */
export function flowFilterParams(params: Params): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const k of ALL_FLOW_FILTER_PARAMS) for (const v of valuesOf(params, k)) out.push([k, v]);
  return out;
}

function hasLabel(p: MonitorPeer, want: { source?: string; key: string; value?: string }): boolean {
  for (const l of p.labels) {
    const colon = l.indexOf(':');
    const source = colon < 0 ? undefined : l.slice(0, colon);
    const rest = colon < 0 ? l : l.slice(colon + 1);
    const eq = rest.indexOf('=');
    const key = eq < 0 ? rest : rest.slice(0, eq);
    const value = eq < 0 ? '' : rest.slice(eq + 1);
    if (key !== want.key) continue;
    if (want.source !== undefined && want.source !== source) continue;
    if (want.value !== undefined && want.value !== value) continue;
    return true;
  }
  return false;
}

function ipOf(p: MonitorPeer): IpAddress | undefined {
  return tryParseIp(p.ip);
}

function peerMatches(p: MonitorPeer, e: MonitorEvent, f: PeerFilter, side: 'source' | 'destination'): boolean {
  if (f.pods && !f.pods.some((w) => p.pod !== undefined && (w.namespace === undefined || w.namespace === p.pod.namespace) && p.pod.name.startsWith(w.namePrefix))) return false;
  if (f.namespaces) {
    const ns = peerNamespace(p);
    if (ns === undefined || !f.namespaces.includes(ns)) return false;
  }
  if (f.labels && !f.labels.some((l) => hasLabel(p, l))) return false;
  if (f.identities && !f.identities.includes(p.identity)) return false;
  if (f.ips) {
    const ip = ipOf(p);
    if (ip === undefined || !f.ips.some((prefix) => prefixContainsIp(prefix, ip))) return false;
  }
  if (f.ports && !f.ports.includes(p.port)) return false;
  if (f.services) {
    // The service is the destination's: a flow to a service's frontend, load-balanced to a backend.
    const svc = side === 'destination' ? e.service?.name : undefined;
    if (svc === undefined) return false;
    const slash = svc.indexOf('/');
    const ns = svc.slice(0, slash);
    const n = svc.slice(slash + 1);
    if (!f.services.some((w) => w.name === n && (w.namespace === undefined || w.namespace === ns))) return false;
  }
  return true;
}

/** Whether a flow passes the filter. */
export function matchesFlow(flow: Flow, f: FlowFilter): boolean {
  const e = flow.event;
  if (f.verdicts && !f.verdicts.includes(flow.verdict)) return false;
  if (f.protocols && !f.protocols.includes(e.protocol)) return false;
  if (f.types && !f.types.includes(e.type)) return false;
  if (f.nodes && !f.nodes.includes(flow.node)) return false;
  if (f.since || f.until) {
    const t = Date.parse(e.time);
    if (f.since && t < f.since.getTime()) return false;
    if (f.until && t > f.until.getTime()) return false;
  }
  if (f.from && !peerMatches(e.source, e, f.from, 'source')) return false;
  if (f.to && !peerMatches(e.destination, e, f.to, 'destination')) return false;
  if (f.either) {
    const either = f.either;
    // Each criterion may hold on either side, as Hubble's --pod, --ip and the like.
    const sides: Array<[MonitorPeer, 'source' | 'destination']> = [
      [e.source, 'source'],
      [e.destination, 'destination'],
    ];
    for (const key of Object.keys(either) as Array<keyof PeerFilter>) {
      const one: PeerFilter = { [key]: either[key] };
      if (!sides.some(([p, side]) => peerMatches(p, e, one, side))) return false;
    }
  }
  return true;
}
