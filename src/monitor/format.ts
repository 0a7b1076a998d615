/**
 * One line per event for `tendril monitor`, in the spirit of `cilium
 * monitor`: what happened first, then the flow with each side's endpoint,
 * identity and labels, then where it was seen and which rule decided.
 *
 *   12:00:01.250 DROP (POLICY: policy denied: no rule allows this flow) ingress
 *     10.0.0.12:40312 [ep 12 id 30012 k8s:app=web] -> 10.0.0.13:80 [ep 13 id 30013 k8s:app=db]
 *     tcp SYN on lxc1a2b, 74 bytes; rule: no rule allows (default deny)
 * (printed on one line). An IPv6 peer with a port is written [addr]:port,
 * so the port cannot be read as the address's last group.
 */
import type { MonitorEvent, MonitorPeer } from './types.js';

function peerText(p: MonitorPeer, showPort: boolean): string {
  const tags = [...(p.endpoint !== undefined ? [`ep ${p.endpoint}`] : []), `id ${p.identity}`, ...p.labels];
  const ip = showPort && p.ip.includes(':') ? `[${p.ip}]` : p.ip;
  return `${ip}${showPort ? `:${p.port}` : ''} [${tags.join(' ')}]`;
}

/** What the verdicts that do not decide the packet's fate mean. */
const VERDICT_NOTES: Partial<Record<string, string>> = {
  'would-drop': ' (staged policy; passed)',
  'would-allow': ' (staged policy; dropped)',
  audit: ' (audit mode; passed)',
};

function what(e: MonitorEvent): string {
  switch (e.type) {
    case 'drop':
      return `DROP (${e.drop!.reason}: ${e.drop!.text})`;
    case 'policy-verdict':
      return `POLICY-VERDICT ${(e.verdict ?? 'unknown').toUpperCase()}${VERDICT_NOTES[e.verdict ?? ''] ?? ''}`;
    case 'trace':
      return `TRACE ${e.tracePoint ?? 'unknown'}`;
  }
}

export function formatEventLine(e: MonitorEvent): string {
  const time = e.time.slice(11, 23);
  const withPorts = e.protocol === 'tcp' || e.protocol === 'udp' || e.protocol === 'sctp';
  // The echo id, which the datapath keeps in the source port for ICMP and ICMPv6 alike.
  const icmpId = (e.protocol === 'icmp' || e.protocol === 'icmpv6') && e.source.port !== 0 ? ` id ${e.source.port}` : '';
  const parts = [
    time,
    what(e),
    ...(e.direction !== 'none' ? [e.direction] : []),
    `${peerText(e.source, withPorts)} -> ${peerText(e.destination, withPorts)}`,
    `${e.protocol}${icmpId}${e.tcpFlags && e.tcpFlags.length > 0 ? ` ${e.tcpFlags.join(',')}` : ''}`,
    `on ${e.interface.name ?? `ifindex ${e.interface.ifindex}`}, ${e.length} bytes`,
  ];
  let line = parts.join(' ');
  if (e.rule) line += `; rule: ${e.rule.text}`;
  return line;
}
