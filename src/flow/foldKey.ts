/**
 * The identity of a flow for folding repeats, on decoded flows: the UI keys
 * the flows it holds by it, so a folded flow sent again replaces its older
 * self. It says what the agent's history folds on (FlowRing, on the raw
 * record): the same event type and outcome, peers, port and rule, and for a
 * forwarded flow the source port (a connection), not for a dropped one (a
 * client's retries and a flood's random ports are one flow).
 */
import type { MonitorEvent } from '../monitor/types.js';

export function foldKey(e: MonitorEvent, verdict: string): string {
  const s = e.source;
  const d = e.destination;
  const sport = verdict === 'forwarded' ? s.port : '*';
  const outcome = e.type === 'drop' ? e.drop?.code : e.type === 'trace' ? e.tracePoint : e.verdict;
  return `${e.type}|${outcome}|${verdict}|${e.direction}|${e.protocol}|${s.identity}|${s.ip}|${sport}|${d.identity}|${d.ip}|${d.port}|${e.rule?.cookie ?? ''}|${e.interface.ifindex}|${e.tcpFlags?.join(',') ?? ''}`;
}
