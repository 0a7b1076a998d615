import type { ApiEndpoint as Endpoint, EndpointPolicyBody as EndpointPolicy, PolicyList } from '../api/types.js';
import { builtinRuleText } from '../monitor/index.js';
import { table } from './agentCli.js';
import { portPrefixText } from './words.js';

/** Table forms of the single-object answers (`endpoint get`, `endpoint policy`, `policy get`), as the listings have. */

export function endpointView(e: Endpoint): string {
  return table([
    ['ID', String(e.id)],
    ['State', e.state + (e.regenerationError ? ` (${e.regenerationError})` : '')],
    ['Pod', e.podName ? `${e.podNamespace ?? ''}/${e.podName}` : '-'],
    ['Container', `${e.containerId} (${e.ifName} in ${e.netns})`],
    ['Identity', e.identity === undefined ? '-' : String(e.identity)],
    ['Addresses', e.addresses.map((a) => a.ip).join(', ') || '-'],
    ['Host interface', `${e.hostIfName} (index ${e.hostIfIndex}, mac ${e.hostMac})`],
    ['Pod mac, MTU', `${e.podMac || '-'}, ${e.mtu}`],
    ['Policy revision', `${e.policyRevision} of ${e.desiredPolicyRevision}`],
    ['Created', e.createdAt + (e.creationTimings ? ` (${Object.entries(e.creationTimings).map(([step, ms]) => `${step} ${ms.toFixed(1)} ms`).join(', ')})` : '')],
    ['Labels', e.labels.join(' ') || '-'],
  ]);
}

export function endpointPolicyView(p: EndpointPolicy): string {
  const enforcementOf = (v: Pick<EndpointPolicy, 'enforcement'>, d: 'ingress' | 'egress') => (v.enforcement[d].enforced ? `enforced (${v.enforcement[d].by.map((r) => r.policy).join(', ')})` : 'not enforced (allow all)');
  const head =
    `Endpoint ${p.endpointId}, identity ${p.identity}, policy revision ${p.policyRevision} (datapath at ${p.realizedPolicyRevision}, ${p.datapathEnforced ? 'enforced on packets' : 'not enforced by this datapath'})\n` +
    `Ingress: ${enforcementOf(p, 'ingress')}\nEgress: ${enforcementOf(p, 'egress')}\n` +
    (p.error ? `Error: ${p.error}\n` : '');
  // The columns and their words are `tendril bpf policy get`'s: the same entries, seen from the agent's side.
  const rowsOf = (entries: EndpointPolicy['entries']) =>
    entries.map((e) => [
      e.key.direction,
      e.key.identity === 0 ? 'ANY' : String(e.key.identity),
      portPrefixText(e.key.proto, e.key.port, e.key.prefixLen),
      e.verdict.toUpperCase(),
      e.derivedFrom.map((r) => r.policy).join(', ') || (e.builtin !== undefined ? builtinRuleText(e.builtin) : '-'),
    ]);
  const header = ['DIRECTION', 'IDENTITY', 'PORT/PROTO', 'ACTION', 'RULE'];
  const out = head + table([header, ...rowsOf(p.entries)]);
  if (!p.staged) return out;
  return (
    out +
    `\nStaged view (reported where it decides otherwise, not enforced):\nIngress: ${enforcementOf(p.staged, 'ingress')}\nEgress: ${enforcementOf(p.staged, 'egress')}\n` +
    table([header, ...rowsOf(p.staged.entries)])
  );
}

export function policyListView(r: PolicyList): string {
  const lost = new Set(r.lost ?? []);
  const warning = lost.size > 0 ? `LOST from the kvstore, enforced from the state dir: ${[...lost].join(', ')} (import them again, or tendril policy confirm-loss)\n` : '';
  const rows = r.policies.map((p) => [lost.has(p.name) ? `${p.name} (lost)` : p.name, p.staged === true ? 'staged' : 'enforced']);
  return `Cluster revision: ${r.clusterRevision} (node revision ${r.revision})\n` + warning + table([['POLICY', 'MODE'], ...rows]);
}
