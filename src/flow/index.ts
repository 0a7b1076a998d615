/**
 * Flows: the agent's bounded history of datapath events (folded repeats),
 * the filters `tendril observe`, GET /v1/flows and the relay share, and the
 * flow's wire form.
 */
export { type Flow, type FlowLine, type FlowNodeStatus, type FlowsLost, FLOW_VERDICTS, flowVerdict, type FlowVerdict, flowVerdictOf } from './types.js';
export { type FlowClock, type FoldHash, FlowRing, type FlowListener, type FlowRingStats, flowVerdictOfHeader } from './flowRing.js';
export { foldKey } from './foldKey.js';
export {
  ALL_FLOW_FILTER_PARAMS,
  type FlowFilter,
  FlowFilterError,
  flowFilterParams,
  matchesFlow,
  parseFlowFilter,
  parseFlowTime,
  type PeerFilter,
  PEER_FILTER_PARAMS,
} from './flowFilter.js';
export { eventKind, FLOW_TABLE_HEADER, flowSummary, flowTableRow, flowTime, formatFlowLine, peerName, peerText, verdictText } from './format.js';
export { parseLabelText, peerNamespace, podLabelsOf, POD_NAMESPACE_LABEL_KEY, type Workload, type WorkloadKind, workloadOf, workloadTitle } from './peer.js';
export { buildFlowMap, type FlowEdge, type FlowMap } from './flowMap.js';
export { type PolicySuggestion, SuggestPolicyError, type SuggestPolicyOptions, suggestPolicy } from './suggestPolicy.js';
