/**
 * What `tendril monitor` shows: one datapath event (src/datapath/bpf/layout.ts
 * DatapathEvent) with everything a person needs resolved: reason and verdict
 * names, endpoint and identity labels, interface name, and for policy
 * decisions the rule that decided. Plain JSON, the same on the wire (NDJSON
 * from GET /v1/monitor) and in `tendril monitor -o json`.
 */
import type { RuleOrigin } from '../policy/index.js';

export const MONITOR_EVENT_TYPES = ['drop', 'policy-verdict', 'trace'] as const;
export type MonitorEventType = (typeof MONITOR_EVENT_TYPES)[number];

/**
 * would-drop / would-allow: the staged view (staged policies promoted) decides
 * the new flow otherwise than the enforced policy, which decided what passed;
 * audit: the policy refused the flow and --policy-audit-mode let it pass.
 */
export type MonitorVerdict = 'allowed' | 'denied' | 'no-match' | 'would-drop' | 'would-allow' | 'audit';
export type MonitorDirection = 'ingress' | 'egress' | 'none';
export type MonitorTracePoint = 'to-endpoint' | 'to-stack' | 'from-stack' | 'from-host' | 'to-host' | 'from-network' | 'to-network' | 'to-overlay' | 'from-overlay';

export interface MonitorPeer {
  /** Local endpoint ID; absent when the peer is not a local endpoint. */
  endpoint?: number;
  /** The pod behind a local endpoint, when its runtime named one (Kubernetes' K8S_POD_NAMESPACE/K8S_POD_NAME). */
  pod?: { namespace: string; name: string };
  identity: number;
  /** The identity's labels; empty when the agent does not know the identity. Shared by the events of one identity: never changed in place. */
  labels: readonly string[];
  ip: string;
  port: number;
}

export interface MonitorRule {
  cookie: number;
  /** `NetworkPolicy/<ns>/<name> spec.ingress[0]`, a tendril policy and path, or what a reserved cookie means. */
  text: string;
  /** The rules the cookie stands for (several only on a hash collision); empty for reserved or unknown cookies. */
  origins: RuleOrigin[];
}

export interface MonitorEvent {
  type: MonitorEventType;
  /** Wall-clock time of the event (ISO 8601), derived from its monotonic timestamp. */
  time: string;
  /** Drops: the reason. */
  drop?: { reason: string; code: number; text: string };
  /** Policy verdicts: the decision. */
  verdict?: MonitorVerdict;
  /** Traces: where the packet was seen. */
  tracePoint?: MonitorTracePoint;
  direction: MonitorDirection;
  source: MonitorPeer;
  destination: MonitorPeer;
  /** tcp, udp, icmp, sctp, or the protocol number. */
  protocol: string;
  /** TCP flags seen on the packet (SYN, ACK, FIN, RST, PSH, URG), TCP only. */
  tcpFlags?: readonly string[];
  interface: { ifindex: number; name?: string };
  /** Length of the packet on the wire, bytes. */
  length: number;
  /** Policy drops and verdicts: the rule that decided. */
  rule?: MonitorRule;
  /** The service the flow was load-balanced for: its ID, and its name while the service exists. */
  service?: { id: number; name?: string };
}

/** Which events a monitor client wants; every given criterion must hold. */
export interface MonitorFilter {
  /** Any of these types (all when absent or empty). */
  types?: readonly MonitorEventType[];
  /** Source or destination endpoint. */
  endpoint?: number;
  /** Source or destination identity. */
  identity?: number;
}
