/**
 * What the monitor's tests resolve events against: a NetworkPolicy allowing
 * web → db:5432, a tendril policy denying web → world, and a record of web
 * (endpoint 12, identity 30012) to db (13, 30013) as the datapath writes it.
 */
import { DropReason, EventType, ReservedCookie, TrafficDirection } from '../../datapath/bpf/constants.js';
import type { DatapathEvent } from '../../datapath/bpf/layout.js';
import { parseIp } from '../../netip/index.js';
import { parsePolicyText } from '../../policy/index.js';

export const SHOP_POLICIES = parsePolicyText(`
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: db-ingress, namespace: shop }
spec:
  podSelector: { matchLabels: { app: db } }
  policyTypes: [Ingress]
  ingress:
    - from: [{ podSelector: { matchLabels: { app: web } } }]
      ports: [{ port: 5432, protocol: TCP }]
---
apiVersion: tendril.io/v1
kind: TendrilNetworkPolicy
metadata: { name: no-world, namespace: shop }
spec:
  endpointSelector: { matchLabels: { app: web } }
  egressDeny:
    - toEntities: [world]
`);

/** A record from web to db:5432 (a default-deny drop unless `over` says otherwise). */
export function shopEvent(over: Partial<DatapathEvent>): DatapathEvent {
  return {
    type: EventType.DROP,
    subtype: Math.abs(DropReason.POLICY.code),
    direction: TrafficDirection.INGRESS,
    proto: 6,
    tcpFlags: 0x02,
    service: 0,
    ifindex: 1,
    srcIdentity: 30012,
    dstIdentity: 30013,
    srcEndpoint: 12,
    dstEndpoint: 13,
    cookie: ReservedCookie.NONE,
    origLen: 74,
    sport: 40312,
    dport: 5432,
    saddr: parseIp('10.200.0.12'),
    daddr: parseIp('10.200.0.13'),
    tsNs: process.hrtime.bigint(),
    ...over,
  };
}
