/**
 * Flows for people, as `hubble observe` prints them: one compact line per
 * flow, or table columns.
 *
 *   Nov 29 12:00:01.250 [node-a] default/web-7d9:40312 (ID:30012) -> default/db-0:80 (ID:30013)
 *     to-service default/db policy-verdict egress DROPPED tcp SYN; rule: NetworkPolicy/default/db spec.ingress[0] ×12
 * (printed on one line). A peer that is no local pod is named by its
 * namespace, or what a reserved identity means (world, host, remote-node).
 */
import type { MonitorPeer } from '../monitor/index.js';
import { workloadOf, workloadTitle } from './peer.js';
import type { Flow, FlowVerdict } from './types.js';

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** `Nov 29 12:00:01.250`, in UTC as the events' times are. */
export function flowTime(iso: string): string {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return `${MONTHS[d.getUTCMonth()]} ${String(d.getUTCDate()).padStart(2, '0')} ${iso.slice(11, 23)}`;
}

/** A peer's name: its pod, else its workload (`namespace/app` of a remote pod, world, host, remote-node). */
export function peerName(p: MonitorPeer): string {
  if (p.pod) return `${p.pod.namespace}/${p.pod.name}`;
  return workloadTitle(workloadOf(p));
}

function withPorts(protocol: string): boolean {
  return protocol === 'tcp' || protocol === 'udp' || protocol === 'sctp';
}

/** A pod as `namespace/name:port (ID:n)`, another peer as `ip:port (ID:n world)`; an IPv6 address with a port in brackets. */
export function peerText(p: MonitorPeer, protocol: string): string {
  const port = withPorts(protocol) ? `:${p.port}` : '';
  if (p.pod) return `${p.pod.namespace}/${p.pod.name}${port} (ID:${p.identity})`;
  const ip = port !== '' && p.ip.includes(':') ? `[${p.ip}]` : p.ip;
  return `${ip}${port} (ID:${p.identity} ${peerName(p)})`;
}

const VERDICT_TEXT: Record<FlowVerdict, string> = { forwarded: 'FORWARDED', dropped: 'DROPPED', audit: 'AUDIT', 'would-drop': 'WOULD-DROP', 'would-allow': 'WOULD-ALLOW' };
const COLORS: Record<FlowVerdict, string> = { forwarded: '32', dropped: '31', audit: '33', 'would-drop': '35', 'would-allow': '36' };

export function verdictText(v: FlowVerdict, color: boolean): string {
  return color ? `\u001b[${COLORS[v]}m${VERDICT_TEXT[v]}\u001b[0m` : VERDICT_TEXT[v];
}

/** What kind of event: `drop (POLICY_DENY)`, `policy-verdict`, `trace to-endpoint`. */
export function eventKind(f: Flow): string {
  const e = f.event;
  if (e.type === 'drop') return `drop (${e.drop?.reason ?? 'unknown'})`;
  if (e.type === 'trace') return `trace ${e.tracePoint ?? 'unknown'}`;
  return 'policy-verdict';
}

/** The flow's details after the verdict: protocol and flags, the rule, the drop's reason text. */
export function flowSummary(f: Flow): string {
  const e = f.event;
  const icmpId = (e.protocol === 'icmp' || e.protocol === 'icmpv6') && e.source.port !== 0 ? ` id ${e.source.port}` : '';
  let text = `${e.protocol}${icmpId}${e.tcpFlags && e.tcpFlags.length > 0 ? ` ${e.tcpFlags.join(',')}` : ''}`;
  if (e.drop) text += `; ${e.drop.text}`;
  if (e.rule) text += `; rule: ${e.rule.text}`;
  return text;
}

export function formatFlowLine(f: Flow, opts: { color?: boolean; showNode?: boolean } = {}): string {
  const e = f.event;
  const parts = [flowTime(e.time)];
  if (opts.showNode) parts.push(`[${f.node}]`);
  parts.push(`${peerText(e.source, e.protocol)} -> ${peerText(e.destination, e.protocol)}`);
  if (e.service?.name !== undefined) parts.push(`to-service ${e.service.name}`);
  parts.push(eventKind(f));
  if (e.direction !== 'none') parts.push(e.direction);
  parts.push(verdictText(f.verdict, opts.color ?? false));
  let line = `${parts.join(' ')} ${flowSummary(f)}`;
  if (f.count > 1) line += ` ×${f.count}`;
  return line;
}

/** The columns of `tendril observe -o table`. */
export const FLOW_TABLE_HEADER = ['TIME', 'NODE', 'SOURCE', 'DESTINATION', 'TYPE', 'VERDICT', 'COUNT', 'SUMMARY'];

export function flowTableRow(f: Flow): string[] {
  const e = f.event;
  return [flowTime(e.time), f.node, peerText(e.source, e.protocol), peerText(e.destination, e.protocol), eventKind(f), verdictText(f.verdict, false), String(f.count), flowSummary(f)];
}
