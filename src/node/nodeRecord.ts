import { z } from 'zod';
import { formatIp, formatPrefix, notUnicast, tryParseIp, tryParsePrefix } from '../netip/index.js';
import { NodeRecordError } from './errors.js';
import { TUNNEL_PROTOCOLS, type NodeRecord } from './types.js';

/**
 * The kvstore form of a node record: JSON, validated both ways. A record
 * another node wrote is outside data — an older or newer agent, a bug, a
 * hand-edited key — so decoding never throws: it returns why the record is
 * unusable and the registry logs and skips it.
 */

/** Node names become the last segment of the key: a DNS-style name, as the agent's `nodeName`. */
export const NODE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$/;

export function isNodeName(name: string): boolean {
  return NODE_NAME.test(name);
}

/** Bounds so one broken writer cannot make every node hold megabytes. */
const MAX_ADDRESSES = 64;
/** Block IPAM gives a node one CIDR per block it owns: many, but bounded. */
const MAX_POD_CIDRS = 4096;
const MAX_REASON = 1024;

const ipText = z.string().refine((s) => tryParseIp(s) !== undefined, 'not an IP address');
// Canonical network form only: a CIDR with host bits set is a writer's bug, not a route.
const cidrText = z.string().refine((s) => tryParsePrefix(s) !== undefined, 'not a CIDR without host bits (addr/len)');

// z.object drops fields it does not know, so a newer agent's extra fields do not make its record garbage here.
const NodeRecordSchema = z
  .object({
    name: z.string().regex(NODE_NAME, 'not a DNS-style node name'),
    addresses: z.array(z.object({ type: z.enum(['InternalIP', 'ExternalIP', 'RouterIP']), ip: ipText })).max(MAX_ADDRESSES),
    podCidrs: z.array(cidrText).max(MAX_POD_CIDRS),
    routingMode: z.enum(['tunnel', 'native']),
    tunnel: z.object({ protocol: z.enum(TUNNEL_PROTOCOLS), port: z.number().int().min(1).max(65535) }).optional(),
    health: z.object({ status: z.enum(['ok', 'degraded']), reason: z.string().max(MAX_REASON).optional() }),
    startedAt: z.string().refine((s) => !Number.isNaN(Date.parse(s)), 'not an ISO 8601 time'),
    // Optional: records of agents before it, and of agents that serve no flows, have none.
    flows: z.object({ address: z.string().max(300).refine(isFlowsAddress, 'not host:port'), tls: z.boolean() }).optional(),
  })
  .refine((r) => r.routingMode !== 'tunnel' || r.tunnel !== undefined, { message: 'routingMode tunnel needs tunnel {protocol, port}', path: ['tunnel'] });

/** `host:port` of a flows listener: an IP (IPv6 in brackets) or a DNS name, a port 1-65535. */
const FLOWS_ADDRESS = /^(?:\[([0-9A-Fa-f:.]+)\]|([0-9]{1,3}(?:\.[0-9]{1,3}){3})|([A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)):([0-9]{1,5})$/;

export function isFlowsAddress(text: string): boolean {
  const m = FLOWS_ADDRESS.exec(text);
  if (!m) return false;
  const port = Number(m[4]);
  if (port < 1 || port > 65535) return false;
  if (m[1] !== undefined) return tryParseIp(m[1])?.family === 6;
  if (m[2] !== undefined) return tryParseIp(m[2])?.family === 4;
  return true;
}

type ParsedRecord = z.infer<typeof NodeRecordSchema>;

/** Same content → same text (fixed field order, canonical addresses), so "unchanged" is a string compare. */
function canonical(r: ParsedRecord): NodeRecord {
  return {
    name: r.name,
    addresses: r.addresses.map((a) => ({ type: a.type, ip: formatIp(tryParseIp(a.ip)!) })),
    podCidrs: r.podCidrs.map((c) => formatPrefix(tryParsePrefix(c)!)),
    routingMode: r.routingMode,
    ...(r.tunnel === undefined ? {} : { tunnel: { protocol: r.tunnel.protocol, port: r.tunnel.port } }),
    health: { status: r.health.status, ...(r.health.reason === undefined ? {} : { reason: r.health.reason }) },
    startedAt: r.startedAt,
    ...(r.flows === undefined ? {} : { flows: { address: r.flows.address, tls: r.flows.tls } }),
  };
}

function describeIssues(err: z.ZodError): string {
  return err.issues
    .slice(0, 3)
    .map((i) => `${i.path.length > 0 ? i.path.join('.') : 'record'}: ${i.message}`)
    .join('; ');
}

/** The record in canonical form; throws NodeRecordError when other nodes could not decode it. */
export function normalizeNodeRecord(record: NodeRecord): NodeRecord {
  // A long health reason (an error text passed on) is cut, not a reason to refuse the node's record.
  const reason = record?.health?.reason;
  const input = reason !== undefined && reason.length > MAX_REASON ? { ...record, health: { ...record.health, reason: `${reason.slice(0, MAX_REASON - 1)}…` } } : record;
  const parsed = NodeRecordSchema.safeParse(input);
  if (!parsed.success) throw new NodeRecordError(`node record of ${JSON.stringify(record?.name)} is not valid: ${describeIssues(parsed.error)}`);
  return canonical(parsed.data);
}

/** The JSON this node writes under its key; throws NodeRecordError for an invalid record. */
export function encodeNodeRecord(record: NodeRecord): string {
  return JSON.stringify(normalizeNodeRecord(record));
}

/**
 * Decodes a record any node wrote; `keyName` is the name from its key, which
 * the record must repeat (a record copied under another node's key would
 * otherwise stand for two nodes). Returns a reason string when unusable.
 */
export function decodeNodeRecord(text: string, keyName?: string): NodeRecord | string {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return 'value is not JSON';
  }
  return parseNodeRecord(raw, keyName);
}

/** decodeNodeRecord for a value already parsed (a record held in another form: a TendrilNode object's spec). */
export function parseNodeRecord(raw: unknown, keyName?: string): NodeRecord | string {
  const parsed = NodeRecordSchema.safeParse(raw);
  if (!parsed.success) return describeIssues(parsed.error);
  if (keyName !== undefined && parsed.data.name !== keyName) return `record names node ${JSON.stringify(parsed.data.name)} under the key of ${JSON.stringify(keyName)}`;
  return canonical(parsed.data);
}

/**
 * The node's first unicast InternalIP of a family: its next hop for that
 * family's pod CIDRs in native routing and its tunnel endpoint (IPv4, or
 * IPv6 on a node without an IPv4 one). A
 * record is another node's word (or a file edited in the kvstore): a
 * loopback, link-local, multicast or unspecified address is no next hop.
 */
export function nodeIpOfFamily(record: NodeRecord, family: 4 | 6): string | undefined {
  return record.addresses.find((a) => {
    const ip = a.type === 'InternalIP' ? tryParseIp(a.ip) : undefined;
    return ip?.family === family && notUnicast(ip) === undefined;
  })?.ip;
}

/** The node's pod CIDRs of a family (a dual-stack node has one or more of each). */
export function podCidrsOfFamily(record: NodeRecord, family: 4 | 6): string[] {
  return record.podCidrs.filter((c) => tryParsePrefix(c)?.family === family);
}

/** The first IPv4 InternalIP: the node's tunnel endpoint and native next hop (an IPv6-only node has none: its IPv6 one is both). */
export function primaryNodeIp(record: NodeRecord): string | undefined {
  return nodeIpOfFamily(record, 4);
}

