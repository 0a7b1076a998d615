/**
 * Checks a PUT /service/{id} body and fills in its defaults. Every refusal
 * is a ServiceError INVALID whose message starts with the field it is
 * about, so an API client can tell what to fix; nothing is changed by a body
 * that fails here.
 */
import type { LbBackendState, LbProtocol } from '../datapath/types.js';
import { MAX_SERVICE_ID } from '../datapath/limits.js';
import { formatIp, formatPrefix, ipFamilyOf, notUnicast, parseIp, prefixContainsIp, tryParseIp, tryParsePrefix } from '../netip/index.js';
import { ServiceError, ServiceErrorCode } from './errors.js';
import type { ServiceFlags, ServiceType, TrafficPolicy } from './types.js';

export const SERVICE_TYPES: readonly ServiceType[] = ['ClusterIP', 'NodePort', 'ExternalIPs', 'LoadBalancer'];
export const TRAFFIC_POLICIES: readonly TrafficPolicy[] = ['Cluster', 'Local'];
export const BACKEND_STATES: readonly LbBackendState[] = ['active', 'terminating', 'quarantined', 'maintenance'];
export const DEFAULT_AFFINITY_TIMEOUT = 10800;
export const MAX_AFFINITY_TIMEOUT = 86400;
export const MAX_BACKEND_WEIGHT = 65535;
/** A service's slots are counted in 16 bits. */
export const MAX_BACKENDS_PER_SERVICE = 65535;
/** loadBalancerSourceRanges of one service (each a prefix in the datapath's trie). */
export const MAX_SOURCE_RANGES = 64;

/** A backend with its defaults filled in. */
export interface NormalizedBackend {
  ip: string;
  port: number;
  weight: number;
  state: LbBackendState;
}

/** A service spec with every default filled in: what the agent keeps, compares and persists. */
export interface NormalizedService {
  id: number;
  frontend: { ip: string; port: number; protocol: Exclude<LbProtocol, 'SCTP'> };
  backends: NormalizedBackend[];
  flags: Required<ServiceFlags>;
}

export interface ValidationContext {
  /** The node's addresses (either family): a NodePort frontend must be 0.0.0.0, :: or one of them, a ClusterIP none of them. Unchecked when absent. */
  nodeAddresses?: ReadonlySet<string>;
  /** The node's router addresses (the pods' gateway): never a frontend. */
  routerAddresses?: ReadonlySet<string>;
  /** The node's endpoints' addresses: never a frontend. */
  podAddresses?: ReadonlySet<string>;
  /** The prefixes the node gives its pods addresses from: no frontend inside (it would shadow a pod to come). */
  podCidrs?: readonly string[];
  /**
   * What the rest of the cluster has at an address (a pod on another node, the
   * ipcache's non-world identity, another node's pod CIDR), as a phrase: a
   * frontend there would send the node's own connections to that pod elsewhere.
   */
  addressOwner?: (ip: string) => string | undefined;
}

/** Fields of GET /service/{id} that a PUT may carry back unchanged: ignored (they are not the client's to set). */
const STATUS_ONLY_TOP = new Set(['realized']);
const STATUS_ONLY_BACKEND = new Set(['id', 'local']);

function invalid(message: string): ServiceError {
  return new ServiceError(ServiceErrorCode.INVALID, message);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function refuseUnknown(obj: Record<string, unknown>, field: string, known: readonly string[], ignored: ReadonlySet<string> = new Set()): void {
  for (const k of Object.keys(obj)) {
    if (!known.includes(k) && !ignored.has(k)) throw invalid(`${field === '' ? '' : `${field}.`}${k}: unknown field (expected ${known.join(', ')})`);
  }
}

function integerIn(v: unknown, field: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw invalid(`${field}: must be a whole number ${min}..${max}, got ${JSON.stringify(v)}`);
  return v;
}

export function validateServiceId(id: unknown, field = 'id'): number {
  return integerIn(id, field, 1, MAX_SERVICE_ID);
}

/**
 * An address of either family, in its canonical text (so "fd00::0a" and
 * "fd00::a" are one frontend or backend). A service is one family: the
 * caller checks its backends against its frontend.
 */
function ipAddress(v: unknown, field: string): string {
  if (typeof v !== 'string') throw invalid(`${field}: must be an IP address string, got ${JSON.stringify(v)}`);
  const ip = tryParseIp(v);
  if (ip === undefined) throw invalid(`${field}: "${v}" is not an IP address`);
  return formatIp(ip);
}

/**
 * The address of a NodePort on every node address: 0.0.0.0 (the datapath's
 * wildcard frontend) and :: (one frontend per node IPv6 address, which the
 * manager expands: an IPv6 reply takes its source from the reverse NAT entry
 * of the frontend the client reached, and a wildcard entry holds no address).
 */
function isEveryNodeAddress(ip: string): boolean {
  return ip === '0.0.0.0' || ip === '::';
}

function unicast(v: unknown, field: string): string {
  const ip = ipAddress(v, field);
  const parsed = parseIp(ip);
  // 169.254.42.1 and 100::a9fe:2a01 are the datapath's hairpin addresses: link-local and discard-only, refused with the rest.
  const why = notUnicast(parsed);
  if (why) throw invalid(`${field}: ${ip} ${why}`);
  return ip;
}

function protocol(v: unknown, field: string): 'TCP' | 'UDP' {
  if (v === 'TCP' || v === 'UDP') return v;
  if (v === 'SCTP') throw invalid(`${field}: SCTP services are not supported yet`);
  throw invalid(`${field}: must be TCP or UDP, got ${JSON.stringify(v)}`);
}

function oneOf<T extends string>(v: unknown, field: string, allowed: readonly T[]): T {
  if (typeof v === 'string' && (allowed as readonly string[]).includes(v)) return v as T;
  throw invalid(`${field}: must be one of ${allowed.join(', ')}, got ${JSON.stringify(v)}`);
}

function frontend(v: unknown, type: ServiceType, ctx: ValidationContext): NormalizedService['frontend'] {
  const field = 'frontend-address';
  if (!isObject(v)) throw invalid(`${field}: must be an object with ip, port and protocol`);
  refuseUnknown(v, field, ['ip', 'port', 'protocol']);
  const port = integerIn(v.port, `${field}.port`, 1, 65535);
  const proto = protocol(v.protocol, `${field}.protocol`);
  let ip: string;
  if (type === 'NodePort') {
    ip = ipAddress(v.ip, `${field}.ip`);
    if (!isEveryNodeAddress(ip) && ctx.nodeAddresses && !ctx.nodeAddresses.has(ip)) {
      throw invalid(`${field}.ip: a NodePort frontend is 0.0.0.0 or :: (every node address of the family) or one of this node's addresses (${[...ctx.nodeAddresses].join(', ') || 'none known'}), got ${ip}`);
    }
    if (!isEveryNodeAddress(ip)) unicast(ip, `${field}.ip`);
  } else {
    ip = unicast(v.ip, `${field}.ip`);
    const why = takenAddress(ip, type, ctx);
    if (why) throw invalid(`${field}.ip: ${ip} ${why}: a ${type} frontend there would capture the traffic meant for it`);
  }
  return { ip, port, protocol: proto };
}

/**
 * Why a ClusterIP, external or LoadBalancer address is one the node already
 * uses, or undefined. The datapath translates a frontend before routing, so
 * a service on the router address took the pods' traffic to their gateway,
 * and one on a pod's address took every connection to that pod (on its
 * port). A node address stays allowed for external and LoadBalancer IPs,
 * where Kubernetes users put them on purpose; a ClusterIP is virtual and
 * never one.
 */
function takenAddress(ip: string, type: ServiceType, ctx: ValidationContext): string | undefined {
  if (ctx.routerAddresses?.has(ip)) return 'is this node\'s router address (the pods\' gateway)';
  if (ctx.podAddresses?.has(ip)) return 'is a pod\'s address';
  const addr = parseIp(ip);
  const cidr = ctx.podCidrs?.find((c) => {
    const p = tryParsePrefix(c);
    return p !== undefined && prefixContainsIp(p, addr);
  });
  if (cidr) return `is in this node's pod CIDR ${cidr} (pods' addresses)`;
  const owner = ctx.addressOwner?.(ip);
  if (owner) return owner;
  if (type === 'ClusterIP' && ctx.nodeAddresses?.has(ip)) return 'is one of this node\'s addresses';
  return undefined;
}

function backends(v: unknown): NormalizedBackend[] {
  const field = 'backend-addresses';
  if (!Array.isArray(v)) throw invalid(`${field}: must be a list (it may be empty)`);
  if (v.length > MAX_BACKENDS_PER_SERVICE) throw invalid(`${field}: at most ${MAX_BACKENDS_PER_SERVICE} backends, got ${v.length}`);
  const seen = new Map<string, number>();
  return v.map((b, i) => {
    const at = `${field}[${i}]`;
    if (!isObject(b)) throw invalid(`${at}: must be an object with ip and port`);
    refuseUnknown(b, at, ['ip', 'port', 'weight', 'state'], STATUS_ONLY_BACKEND);
    const ip = unicast(b.ip, `${at}.ip`);
    const port = integerIn(b.port, `${at}.port`, 1, 65535);
    const weight = b.weight === undefined ? 1 : integerIn(b.weight, `${at}.weight`, 0, MAX_BACKEND_WEIGHT);
    const state = b.state === undefined ? 'active' : oneOf(b.state, `${at}.state`, BACKEND_STATES);
    const key = `${ip}:${port}`;
    const dup = seen.get(key);
    if (dup !== undefined) throw invalid(`${at}: duplicate of ${field}[${dup}] (${key})`);
    seen.set(key, i);
    return { ip, port, weight, state };
  });
}

function flags(v: unknown): Required<ServiceFlags> {
  const field = 'flags';
  if (!isObject(v)) throw invalid(`${field}: must be an object with at least type`);
  refuseUnknown(v, field, ['type', 'trafficPolicy', 'internalTrafficPolicy', 'sessionAffinity', 'sessionAffinityTimeout', 'sourceRanges']);
  const type = oneOf(v.type, `${field}.type`, SERVICE_TYPES);
  const trafficPolicy = v.trafficPolicy === undefined ? 'Cluster' : oneOf(v.trafficPolicy, `${field}.trafficPolicy`, TRAFFIC_POLICIES);
  // Kubernetes' externalTrafficPolicy: traffic of a ClusterIP never comes from outside the node's pods.
  if (trafficPolicy === 'Local' && type === 'ClusterIP') throw invalid(`${field}.trafficPolicy: Local applies to NodePort, ExternalIPs and LoadBalancer services, not ClusterIP`);
  const internalTrafficPolicy = v.internalTrafficPolicy === undefined ? 'Cluster' : oneOf(v.internalTrafficPolicy, `${field}.internalTrafficPolicy`, TRAFFIC_POLICIES);
  if (v.sessionAffinity !== undefined && typeof v.sessionAffinity !== 'boolean') throw invalid(`${field}.sessionAffinity: must be true or false, got ${JSON.stringify(v.sessionAffinity)}`);
  const sessionAffinityTimeout = v.sessionAffinityTimeout === undefined ? DEFAULT_AFFINITY_TIMEOUT : integerIn(v.sessionAffinityTimeout, `${field}.sessionAffinityTimeout`, 1, MAX_AFFINITY_TIMEOUT);
  return { type, trafficPolicy, internalTrafficPolicy, sessionAffinity: v.sessionAffinity === true, sessionAffinityTimeout, sourceRanges: sourceRanges(v.sourceRanges, `${field}.sourceRanges`, type) };
}

/**
 * loadBalancerSourceRanges: CIDRs (host bits cleared, as Kubernetes reads
 * them), sorted and without repeats, on a LoadBalancer only (Kubernetes
 * applies them to the load balancer's addresses, never to the ClusterIP or
 * NodePort). The family is checked against the frontend's by the caller.
 */
function sourceRanges(v: unknown, field: string, type: ServiceType): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) throw invalid(`${field}: must be a list of CIDRs`);
  if (v.length > 0 && type !== 'LoadBalancer') throw invalid(`${field}: only a LoadBalancer frontend takes sourceRanges, this one is ${type}`);
  if (v.length > MAX_SOURCE_RANGES) throw invalid(`${field}: at most ${MAX_SOURCE_RANGES} ranges, got ${v.length}`);
  const out = new Set<string>();
  v.forEach((r, i) => {
    const p = typeof r === 'string' ? tryParsePrefix(r, { hostBits: 'mask' }) : undefined;
    if (!p) throw invalid(`${field}[${i}]: ${JSON.stringify(r)} is not a CIDR`);
    out.add(formatPrefix(p));
  });
  return [...out].sort();
}

/**
 * The body of PUT /service/{id} for service `id`, checked and with its
 * defaults filled in. Throws ServiceError INVALID naming the field.
 */
export function validateServiceSpec(id: unknown, body: unknown, ctx: ValidationContext = {}): NormalizedService {
  const sid = validateServiceId(id);
  if (!isObject(body)) throw invalid('body: must be an object with frontend-address, backend-addresses and flags');
  refuseUnknown(body, '', ['id', 'frontend-address', 'backend-addresses', 'flags'], STATUS_ONLY_TOP);
  if (body.id !== undefined) {
    const bodyId = validateServiceId(body.id);
    if (bodyId !== sid) throw invalid(`id: the body's ID ${bodyId} is not the path's ${sid}`);
  }
  const f = flags(body.flags);
  const front = frontend(body['frontend-address'], f.type, ctx);
  const list = backends(body['backend-addresses']);
  const family = ipFamilyOf(front.ip);
  // A service is one family (a dual-stack Kubernetes Service is one service per family): the datapath translates within it.
  const other = list.findIndex((b) => ipFamilyOf(b.ip) !== family);
  if (other >= 0) throw invalid(`backend-addresses[${other}].ip: ${list[other]!.ip} is not IPv${family} like the frontend ${front.ip} (a service is one family)`);
  const foreign = f.sourceRanges.findIndex((r) => ipFamilyOf(r.slice(0, r.indexOf('/'))) !== family);
  if (foreign >= 0) throw invalid(`flags.sourceRanges: ${f.sourceRanges[foreign]} is not IPv${family} like the frontend ${front.ip}`);
  return { id: sid, frontend: front, backends: list, flags: f };
}

/** The datapath's key of a frontend: one service per (address, port, protocol). */
export function frontendKey(f: NormalizedService['frontend']): string {
  return `${f.ip}:${f.port}/${f.protocol}`;
}

/** The registry's key of a backend: shared by every service with this address, port and protocol. */
export function backendKey(ip: string, port: number, protocol: string): string {
  return `${ip}:${port}/${protocol}`;
}

/** Whether two normalized specs are the same service (backends in order: slot order is part of it). */
export function sameService(a: NormalizedService, b: NormalizedService): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
