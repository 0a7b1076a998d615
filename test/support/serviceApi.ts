/** Services through the agent's API socket (PUT/GET/DELETE /service/{id}), and the maps behind them through the CLI. */
import type { BackendAddress, ServiceSpec, ServiceStatus, ServiceType, TrafficPolicy } from '../../src/service/types.js';
import type { LbBackendState, LbProtocol } from '../../src/datapath/types.js';
import { cliJson, type DatapathNode } from './datapathNode.js';
import { run } from './run.js';
import { formatIp, ipFromBytes } from '../../src/netip/ip.js';
import { bpfConntrack, bpfMetrics, dropCounts } from './datapathObserve.js';
import { failures, type SessionResult, type ShotResult } from './serviceProcess.js';

export type { ServiceSpec, ServiceStatus } from '../../src/service/types.js';

export interface ServiceShape {
  frontend: { ip: string; port: number; protocol?: LbProtocol };
  backends: ReadonlyArray<{ ip: string; port: number; state?: LbBackendState; weight?: number }>;
  type?: ServiceType;
  trafficPolicy?: TrafficPolicy;
  sessionAffinity?: boolean;
  sessionAffinityTimeout?: number;
}

/** The API body for a service, in the shape. */
export function serviceSpec(s: ServiceShape): ServiceSpec {
  return {
    'frontend-address': { ip: s.frontend.ip, port: s.frontend.port, protocol: s.frontend.protocol ?? 'TCP' },
    'backend-addresses': s.backends.map((b): BackendAddress => ({ ip: b.ip, port: b.port, weight: b.weight ?? 1, state: b.state ?? 'active' })),
    flags: {
      type: s.type ?? 'ClusterIP',
      trafficPolicy: s.trafficPolicy ?? 'Cluster',
      sessionAffinity: s.sessionAffinity ?? false,
      ...(s.sessionAffinityTimeout !== undefined ? { sessionAffinityTimeout: s.sessionAffinityTimeout } : {}),
    },
  };
}

/**
 * PUT /service/{id}, then waits until GET says the datapath holds it as it
 * is now (`realized`): the test's next packet must meet the new maps.
 */
export async function upsertService(node: DatapathNode, id: number, s: ServiceShape, timeoutMs = 5000): Promise<ServiceStatus> {
  await node.agent.client.request<unknown>('PUT', `/service/${id}`, serviceSpec(s));
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const st = await getService(node, id);
    if (st.realized) return st;
    if (Date.now() > deadline) throw new Error(`service ${id} not realized in ${timeoutMs} ms: ${JSON.stringify(st)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export async function getService(node: DatapathNode, id: number): Promise<ServiceStatus> {
  return node.agent.client.request<ServiceStatus>('GET', `/service/${id}`);
}

export async function deleteService(node: DatapathNode, id: number): Promise<void> {
  await node.agent.client.request<unknown>('DELETE', `/service/${id}`);
}

/** `tendril bpf lb list -o json`, as the CLI prints it (for diagnostics in assertion messages). */
export async function bpfLbList(node: DatapathNode): Promise<unknown> {
  try {
    return await cliJson<unknown>(node, ['bpf', 'lb', 'list']);
  } catch (err) {
    return `(bpf lb list failed: ${(err as Error).message.slice(0, 300)})`;
  }
}

/** Short text of what the node holds, attached to a failing assertion. */
export async function lbDiagnostics(node: DatapathNode): Promise<string> {
  return JSON.stringify(await bpfLbList(node)).slice(0, 3000);
}

/**
 * Entries of the SNAT map as bpftool dumps them from the pin, each key's and
 * value's bytes: read without the agent, so a test of NAT GC does not trust
 * the agent's own decoder. Keys decode with decodeNatKey.
 */
export async function snatEntries(node: DatapathNode): Promise<Array<{ key: number[]; value: number[] }>> {
  const out: Array<{ key: number[]; value: number[] }> = [];
  // Both families' tables: tendril_snat4, then tendril_snat6 (keys tell them apart by length).
  for (const pin of [`${node.bpffsRoot}/tendril/tendril_snat4`, `${node.bpffsRoot}/tendril/tendril_snat6`]) {
    const r = await run(['bpftool', '-j', 'map', 'dump', 'pinned', pin]);
    if (r.code !== 0) throw new Error(`bpftool map dump ${pin}: ${r.stderr.trim() || r.stdout.trim()}`);
    const rows = JSON.parse(r.stdout) as Array<{ key: string[] | number[]; value: string[] | number[] } | { formatted?: unknown }>;
    const bytes = (a: ReadonlyArray<string | number>) => a.map((x) => (typeof x === 'number' ? x : Number.parseInt(x, 16)));
    out.push(...rows.flatMap((row) => ('key' in row && 'value' in row ? [{ key: bytes(row.key), value: bytes(row.value) }] : [])));
  }
  return out;
}

/** A nat4_key or nat6_key (bpf/lib/nat.h, nat6.h): saddr, daddr, sport, dport (network order), proto, dir. */
export interface NatKey {
  saddr: string;
  daddr: string;
  sport: number;
  dport: number;
  proto: number;
  dir: number;
}

export function decodeNatKey(b: readonly number[]): NatKey {
  // A nat6_key is 40 bytes (two 16-byte addresses first), a nat4_key 16.
  const size = b.length >= 40 ? 16 : 4;
  const ip = (o: number) => formatIp(ipFromBytes(Uint8Array.from(b.slice(o, o + size))));
  const o = 2 * size;
  return { saddr: ip(0), daddr: ip(size), sport: (b[o]! << 8) | b[o + 1]!, dport: (b[o + 2]! << 8) | b[o + 3]!, proto: b[o + 4]!, dir: b[o + 5]! };
}

/** Conntrack entries on the client ports of failed flows, as text for a failure message ('' when none failed). */
export async function ctOfFailed(node: DatapathNode, results: ReadonlyArray<SessionResult | ShotResult>): Promise<string> {
  const ports = results.flatMap((r) => (r.outcome !== 'open' && 'localPort' in r && r.localPort ? [r.localPort] : []));
  if (ports.length === 0) return '';
  const rows = (await bpfConntrack(node)).filter((r) => ports.includes(r.sport) || ports.includes(r.dport));
  const text = rows.map((r) => `${r.table} ${r.saddr}:${r.sport}->${r.daddr}:${r.dport} pkts ${r.packets} reply ${r.replySeen} closing ${r.closing} ttl ${r.expiresInSeconds}`);
  return `conntrack on the failed flows' client ports ${JSON.stringify(ports)}: ${JSON.stringify(text)}`;
}

/**
 * Fails unless every connection or datagram got its answers; the message
 * then carries what the node holds for them (conntrack on their client
 * ports, the drop counters, the load-balancer maps, the agent's last
 * warnings), gathered only on failure.
 */
export async function assertAllAnswered(node: DatapathNode, results: ReadonlyArray<SessionResult | ShotResult>, what: string): Promise<void> {
  const text = failures(results);
  if (text === 'none') return;
  const drops = JSON.stringify(dropCounts(await bpfMetrics(node)));
  const log = node.agent.output.split('\n').filter((l) => /"level":(40|50)/.test(l)).slice(-15).join('\n');
  throw new Error(`${what}: ${text}\n${await ctOfFailed(node, results)}\ndrops so far: ${drops}\nbpf lb list: ${(await lbDiagnostics(node)).slice(0, 1500)}\nagent warnings and errors (last 15):\n${log}`);
}
