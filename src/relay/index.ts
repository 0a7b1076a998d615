/**
 * The relay: every node's flows merged in time order behind one address
 * (`tendril relay`), the nodes found in the node registry or given.
 */
export { Relay, type RelayOptions } from './relay.js';
export { mergeHistories, ReorderWindow, type TimedLine } from './merge.js';
export { parsePeer, peerOfRecord, type PeerSource, type RelayPeer, RegistryPeers, StaticPeers, type FollowedRegistry } from './peers.js';
export { newCounters, type PeerClientOptions, type RelayCounters, RelaySession } from './relaySession.js';
export { RelayConfigError } from './errors.js';
