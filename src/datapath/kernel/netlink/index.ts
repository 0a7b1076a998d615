/** rtnetlink for the agent: typed, promise-returning, per network namespace. */
export { Netlink, type NetlinkOpenOptions, type LinkAddressSpec, type LinkRouteSpec, type LinkNeighbourSpec, type LinkBpfFilterSpec } from './rtnetlink.js';
export { NetlinkBatch } from './operations.js';
export { NetlinkSocket, type NetlinkSocketOptions, type BatchItem } from './socket.js';
export type { Link, LinkRef, LinkChanges, VethSpec, VethPeerSpec, VxlanSpec, VxlanInfo } from './links.js';
export type { Address, AddressSpec } from './addresses.js';
export type { Route, RouteSpec, RouteTypeName } from './routes.js';
export type { Neighbour, NeighbourSpec } from './neighbours.js';
export type { BpfFilter, BpfFilterSpec, Qdisc, TcDirection } from './tc.js';
export type { IpFamily } from '../../../netip/index.js';
export { type Prefix, parsePrefix, formatPrefix } from './address.js';
export { RT_SCOPE, RT_TABLE_MAIN, RT_TABLE_LOCAL, RTN_UNICAST, type RouteScopeName, type NeighbourStateName } from './constants.js';
