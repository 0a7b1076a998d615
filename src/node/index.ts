/**
 * Public API of src/node: the cluster's nodes in the kvstore (the registry),
 * what this node makes of the others (ipcache entries and routes), and the
 * pod MTU that the routing mode leaves.
 */
export * from './types.js';
export { NodeError, NodeErrorCode, NodeConfigError, NodeRecordError } from './errors.js';
export { NODE_NAME, isNodeName, isFlowsAddress, encodeNodeRecord, decodeNodeRecord, parseNodeRecord, normalizeNodeRecord, primaryNodeIp, nodeIpOfFamily, podCidrsOfFamily } from './nodeRecord.js';
export { NodeRegistry, type NodeRegistryOptions } from './nodeRegistry.js';
export { KnownNodes, type KnownNode } from './knownNodes.js';
export { RemoteNodes, type RemoteNodesOptions, remoteNodeOwner } from './remoteNodes.js';
export { resolvePodMtu, routingOverhead, DEFAULT_UNDERLAY_MTU, MIN_POD_MTU } from './mtu.js';
export { OwnNode, type OwnNodeFacts, type OwnNodeOptions, ownNodeRecord } from './ownNode.js';
export { clusterAddressOwner } from './clusterAddressOwner.js';
export { HostAddresses, type HostAddressesOptions } from './hostAddresses.js';
