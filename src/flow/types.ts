/**
 * A flow: one datapath event (a MonitorEvent, resolved), as the agent's flow
 * history keeps it. Repeats of the same event fold into one flow with a
 * count and the time of the first and the last, so a flood of one dropped
 * flow takes one place in the history, not all of it. The same JSON on the
 * wire (GET /v1/flows, NDJSON), in `tendril observe -o json` and in the relay.
 */
import type { MonitorEvent, MonitorEventType, MonitorVerdict } from '../monitor/index.js';

/**
 * What became of the flow, as Hubble's verdicts: `forwarded` (traced or
 * allowed), `dropped` (a drop, or a policy refusal), and the verdicts that
 * change nothing that passes: `audit` (refused by policy but passed, the
 * agent runs in audit mode), `would-drop` and `would-allow` (a staged
 * policy would decide otherwise than the enforced ones).
 */
export const FLOW_VERDICTS = ['forwarded', 'dropped', 'audit', 'would-drop', 'would-allow'] as const;
export type FlowVerdict = (typeof FLOW_VERDICTS)[number];

export interface Flow {
  /** The node whose datapath saw it. */
  node: string;
  verdict: FlowVerdict;
  /** How many times the datapath reported it (1 unless repeats folded into it). */
  count: number;
  /** When it was first seen (ISO 8601); `event.time` is the last. */
  firstTime: string;
  /** The latest event. */
  event: MonitorEvent;
}

/** A node the flows should have come from but did not (a relay's peer, unreachable or failing). */
export interface FlowNodeStatus {
  node: string;
  state: 'ok' | 'unavailable';
  /** Why it is unavailable. */
  message?: string;
  /** Flows it sent in this answer. */
  flows?: number;
}

/** Flows a server could not send (its client too slow, a ring overrun): counted, never hidden. */
export interface FlowsLost {
  node: string;
  count: number;
  reason: string;
}

/** One line of GET /v1/flows: a flow, a node's status, or a count of flows lost. */
export type FlowLine = { flow: Flow } | { nodeStatus: FlowNodeStatus } | { lost: FlowsLost };

/** The flow's verdict, from its event. */
export function flowVerdictOf(e: MonitorEvent): FlowVerdict {
  return flowVerdict(e.type, e.verdict);
}

/** The flow's verdict, from its event's type and (policy verdicts) its verdict. */
export function flowVerdict(type: MonitorEventType, verdict: MonitorVerdict | undefined): FlowVerdict {
  if (type === 'drop') return 'dropped';
  if (type === 'policy-verdict') {
    switch (verdict) {
      case 'denied':
      case 'no-match':
        return 'dropped';
      case 'audit':
        return 'audit';
      case 'would-drop':
        return 'would-drop';
      case 'would-allow':
        return 'would-allow';
      default:
        return 'forwarded';
    }
  }
  return 'forwarded';
}
