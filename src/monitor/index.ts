/**
 * `tendril monitor`: the datapath's events (drops, policy verdicts, traces)
 * decoded, resolved and filtered for people. The agent reads the ring
 * buffer (MonitorHub) and streams MonitorEvents as NDJSON; the CLI prints them.
 */
export { MONITOR_EVENT_TYPES, type MonitorDirection, type MonitorEvent, type MonitorEventType, type MonitorFilter, type MonitorPeer, type MonitorRule, type MonitorTracePoint, type MonitorVerdict } from './types.js';
export { buildEvent, decodeRecord, directionOf, PROTOCOLS, TCP_FLAGS, TRACE_NAMES, VERDICT_NAMES, type MonitorContext, resolveEvent, protocolName, tcpFlagNames, verdictName, wallClockOf } from './decode.js';
export {
  captureRefs,
  copyEventRefs,
  EVENT_TYPE_NAMES,
  type EventRefs,
  newEventRefs,
  newRecordHeader,
  type PodRef,
  readRecordHeader,
  type RecordHeader,
} from './eventRefs.js';
export { matchesFilter } from './filter.js';
export { formatEventLine } from './format.js';
export { builtinRuleText, describeCookie, originText } from './ruleText.js';
export { InterfaceNames, type LinkLister, netlinkLinks } from './interfaceNames.js';
export { agentMonitorContext, type AgentMonitorSources, CurrentRuleIndex, policyRuleOrigins } from './agentContext.js';
export { type EventRecorder, type EventSource, MonitorHub, type MonitorHubStats, type MonitorSubscription, pinnedRingBuffer } from './hub.js';
