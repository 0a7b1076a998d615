export { AgentMetrics, type AgentMetricsSources, CNI_VERBS, cidrSize, countedCni, type IpamAllocationView, type OperationResult } from './agentMetrics.js';
export { countedBackend } from './countedBackend.js';
export { DatapathMetrics, type DatapathMetricsSource, type MapUsage, pinnedDatapathSource } from './datapathMetrics.js';
export { MetricsServeError, type MetricsServeErrorCode, MetricsServer, type MetricsSource, parseServeAddress, type ServeAddress, type HealthSource } from './metricsServer.js';
export { FLOW_METRICS_DEFAULT_CAP, FLOW_METRICS_LABELS, FlowMetrics, type FlowMetricsLabels, type FlowMetricsOptions, FOLDED_VALUE, peerContext, workloadOfPodName } from './flowMetrics.js';
