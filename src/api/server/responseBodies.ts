import type { ApiEndpoint, ApiIpcacheEntry, DirectionDecisionBody, EndpointPolicyBody, IpamAllocation, PolicyMapEntryBody, PolicyTraceResult, RuleOriginBody } from '../types.js';
import type { EndpointStatus } from '../../endpoint/index.js';
import type { IpcacheEntry } from '../../ipcache/index.js';
import type { Allocation } from '../../ipam/index.js';
import { type EndpointPolicy, formatTrace, type TraceResult } from '../../policy/index.js';

// The agent's objects as the API's bodies (api/openapi.yaml), field by field:
// an internal field reaches a client only when the document names it, and
// the generated types check every field here at compile time.

type RuleOrigin = EndpointPolicy['enforcement']['ingress']['by'][number];
type DirectionDecision = TraceResult['egress'];
type MapEntry = EndpointPolicy['entries'][number];

export function allocationBody(a: Allocation): IpamAllocation {
  return {
    owner: a.owner,
    family: a.family,
    ip: a.ip,
    prefixLength: a.prefixLength,
    ...(a.gateway ? { gateway: a.gateway } : {}),
    pool: a.pool,
    cidr: a.cidr,
    seq: a.seq,
    ...(a.expiresAt !== undefined ? { expiresAt: a.expiresAt } : {}),
    ...(a.borrowed ? { borrowed: true } : {}),
  };
}

export function endpointBody(ep: EndpointStatus): ApiEndpoint {
  return {
    id: ep.id,
    containerId: ep.containerId,
    ifName: ep.ifName,
    netns: ep.netns,
    ...(ep.networkName !== undefined ? { networkName: ep.networkName } : {}),
    ...(ep.podNamespace !== undefined ? { podNamespace: ep.podNamespace } : {}),
    ...(ep.podName !== undefined ? { podName: ep.podName } : {}),
    labels: ep.labels,
    ...(ep.labelsRevision !== undefined ? { labelsRevision: ep.labelsRevision } : {}),
    ...(ep.identity !== undefined ? { identity: ep.identity } : {}),
    ...(ep.identityLabels !== undefined ? { identityLabels: ep.identityLabels } : {}),
    addresses: ep.addresses.map((a) => ({ family: a.family, ip: a.ip, gateway: a.gateway, pool: a.pool, cidr: a.cidr, seq: a.seq })),
    hostIfName: ep.hostIfName,
    hostIfIndex: ep.hostIfIndex,
    hostMac: ep.hostMac,
    podMac: ep.podMac,
    mtu: ep.mtu,
    state: ep.state,
    ipamOwned: ep.ipamOwned,
    createdAt: ep.createdAt,
    policyRevision: ep.policyRevision,
    desiredPolicyRevision: ep.desiredPolicyRevision,
    ...(ep.regenerationError !== undefined ? { regenerationError: ep.regenerationError } : {}),
    ...(ep.creationTimings !== undefined ? { creationTimings: ep.creationTimings } : {}),
  };
}

export function ipcacheEntryBody(e: IpcacheEntry): ApiIpcacheEntry {
  return { prefix: e.prefix, identity: e.identity, ...(e.hostIP !== undefined ? { hostIP: e.hostIP } : {}), source: e.source, owner: e.owner };
}

function ruleOriginBody(o: RuleOrigin): RuleOriginBody {
  return { policy: o.policy, rule: o.rule, path: o.path };
}

function decisionBody(d: DirectionDecision): DirectionDecisionBody {
  return { direction: d.direction, verdict: d.verdict, reason: d.reason, decidingRules: d.decidingRules.map(ruleOriginBody), enforcedBy: d.enforcedBy.map(ruleOriginBody) };
}

export function traceBody(t: TraceResult): PolicyTraceResult {
  return { verdict: t.verdict, egress: decisionBody(t.egress), ingress: decisionBody(t.ingress), text: formatTrace(t) };
}

function mapEntryBody(e: MapEntry): PolicyMapEntryBody {
  const { direction, identity, proto, port, prefixLen } = e.key;
  return {
    key: { direction, identity, proto, port, prefixLen },
    verdict: e.verdict,
    derivedFrom: e.derivedFrom.map(ruleOriginBody),
    ...(e.builtin !== undefined ? { builtin: e.builtin } : {}),
  };
}

/**
 * `policyRevision`: the revision the map state was computed at; `realized`: the one the endpoint's datapath holds;
 * `enforced`: whether that datapath enforces it on packets (the eBPF datapath does, the routing one does not).
 */
export function endpointPolicyBody(p: EndpointPolicy, policyRevision: number, realized: number, enforced = false): EndpointPolicyBody {
  return {
    endpointId: p.endpointId,
    identity: p.identity,
    policyRevision,
    realizedPolicyRevision: realized,
    enforcement: {
      ingress: { enforced: p.enforcement.ingress.enforced, by: p.enforcement.ingress.by.map(ruleOriginBody) },
      egress: { enforced: p.enforcement.egress.enforced, by: p.enforcement.egress.by.map(ruleOriginBody) },
    },
    entries: p.entries.map(mapEntryBody),
    ...(p.staged
      ? {
          staged: {
            enforcement: {
              ingress: { enforced: p.staged.enforcement.ingress.enforced, by: p.staged.enforcement.ingress.by.map(ruleOriginBody) },
              egress: { enforced: p.staged.enforcement.egress.enforced, by: p.staged.enforcement.egress.by.map(ruleOriginBody) },
            },
            entries: p.staged.entries.map(mapEntryBody),
          },
        }
      : {}),
    ...(p.error ? { error: p.error.message } : {}),
    datapathEnforced: enforced,
  };
}
