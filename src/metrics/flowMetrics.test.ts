// Flow metrics from datapath events as the agent resolves them (records
// decoded with the contract's codec, resolved against real parsed policies):
// counts by type and verdict, drops by reason, verdicts by the rule that
// decided; the workload labels; the cap on rule and context label values.
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { DropReason, EventType, PolicyVerdict, ReservedCookie, TracePoint, TrafficDirection } from '../datapath/bpf/constants.js';
import { datapathEvent, type DatapathEvent } from '../datapath/bpf/layout.js';
import { ruleCookie } from '../datapath/bpf/ruleCookie.js';
import { encode } from '../datapath/kernel/bpf/codec.js';
import { agentMonitorContext, captureRefs, InterfaceNames, type MonitorContext, newEventRefs, newRecordHeader, policyRuleOrigins, readRecordHeader } from '../monitor/index.js';
import { parseIp } from '../netip/index.js';
import { SHOP_POLICIES, shopEvent } from '../monitor/testing/shopPolicies.js';
import { AgentMetrics, FlowMetrics, type FlowMetricsLabels, peerContext, workloadOfPodName } from './index.js';
import { parseExposition, sampleValue } from './testing/exposition.js';

const POLICIES = SHOP_POLICIES;
const [DB_ALLOW, NO_WORLD] = policyRuleOrigins(POLICIES);
const DB_ALLOW_TEXT = 'NetworkPolicy/shop/db-ingress spec.ingress[0]';
const NO_WORLD_TEXT = 'TendrilNetworkPolicy/shop/no-world spec.egressDeny[0]';

const LABELS: Record<number, string[]> = {
  2: ['reserved:world'],
  30012: ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=shop'],
  30013: ['k8s:app.kubernetes.io/name=postgres', 'k8s:io.kubernetes.pod.namespace=shop'],
  30020: ['k8s:io.kubernetes.pod.namespace=billing', 'k8s:tier=batch'],
};
const PODS: Record<number, { namespace: string; name: string }> = { 12: { namespace: 'shop', name: 'web-7d9f8b6c5-x2x4z' }, 13: { namespace: 'shop', name: 'db-0' }, 20: { namespace: 'billing', name: 'invoicer-8f5b9c7d4-qvp2k' } };
const INTERFACES = new InterfaceNames(async () => [{ index: 1, name: 'lo' }]);
before(() => INTERFACES.refresh());

function context(): MonitorContext {
  return agentMonitorContext({ identityLabels: (id) => LABELS[id], policies: () => POLICIES, policyRevision: () => 1, interfaces: INTERFACES, endpointPod: (id) => PODS[id] });
}

/** A record as the datapath writes it, its header read and its numbers resolved as the hub does. */
function resolved(over: Partial<DatapathEvent>, ctx = context()): Parameters<FlowMetrics['record']> {
  const record = encode(datapathEvent, shopEvent({ type: EventType.POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, cookie: ruleCookie(DB_ALLOW!), ...over }));
  const header = newRecordHeader();
  assert.ok(readRecordHeader(record, header), 'the record is one the hub reads');
  return [record, header, captureRefs(header, ctx, newEventRefs())];
}

const allowed = (over: Partial<DatapathEvent> = {}) => resolved(over);
const denyWorld = () =>
  resolved({ type: EventType.POLICY_VERDICT, subtype: PolicyVerdict.DENIED, direction: TrafficDirection.EGRESS, dstIdentity: 2, dstEndpoint: 0, daddr: parseIp('203.0.113.9'), dport: 443, cookie: ruleCookie(NO_WORLD!) });
const denyWorldDrop = () =>
  resolved({ type: EventType.DROP, subtype: Math.abs(DropReason.POLICY_DENY.code), direction: TrafficDirection.EGRESS, dstIdentity: 2, dstEndpoint: 0, daddr: parseIp('203.0.113.9'), dport: 443, cookie: ruleCookie(NO_WORLD!) });
const trace = () => resolved({ type: EventType.TRACE, subtype: TracePoint.TO_ENDPOINT, cookie: 0 });

function metrics(labels: FlowMetricsLabels = 'none', cap?: number): { flows: FlowMetrics; text: () => Promise<string> } {
  const registry = new Registry();
  const flows = new FlowMetrics(registry, { labels, ...(cap !== undefined ? { cap } : {}) });
  return { flows, text: () => registry.metrics() };
}

describe('flow metrics', () => {
  test('every event counted by type and verdict; drops by reason and direction; verdicts by the rule that decided', async () => {
    const m = metrics();
    for (let i = 0; i < 3; i++) m.flows.record(...allowed({ sport: 40000 + i }));
    m.flows.record(...denyWorld());
    m.flows.record(...denyWorldDrop());
    m.flows.record(...denyWorldDrop());
    m.flows.record(...trace());
    // Default deny: no entry matched, named by the rules that enforce.
    m.flows.record(...resolved({ type: EventType.DROP, subtype: Math.abs(DropReason.POLICY.code), cookie: ReservedCookie.NONE }));
    const text = await m.text();
    assert.equal(sampleValue(text, 'tendril_flows_processed_total', { type: 'policy-verdict', verdict: 'forwarded' }), 3);
    assert.equal(sampleValue(text, 'tendril_flows_processed_total', { type: 'policy-verdict', verdict: 'dropped' }), 1);
    assert.equal(sampleValue(text, 'tendril_flows_processed_total', { type: 'drop', verdict: 'dropped' }), 3);
    assert.equal(sampleValue(text, 'tendril_flows_processed_total', { type: 'trace', verdict: 'forwarded' }), 1);
    assert.equal(sampleValue(text, 'tendril_flow_drops_total', { reason: 'POLICY_DENY', direction: 'egress' }), 2);
    assert.equal(sampleValue(text, 'tendril_flow_drops_total', { reason: 'POLICY', direction: 'ingress' }), 1);
    assert.equal(sampleValue(text, 'tendril_policy_verdicts_total', { direction: 'ingress', verdict: 'forwarded', rule: DB_ALLOW_TEXT }), 3);
    assert.equal(sampleValue(text, 'tendril_policy_verdicts_total', { direction: 'egress', verdict: 'dropped', rule: NO_WORLD_TEXT }), 1);
    // Drops are not verdicts: the datapath reports the verdict that led to a drop on its own.
    assert.equal(parseExposition(text).filter((s) => s.name === 'tendril_policy_verdicts_total').length, 2);
    assert.equal(sampleValue(text, 'tendril_flow_metrics_folded_total', { label: 'rule' }), 0);
    // No workload labels unless asked for, and never an address.
    assert.ok(!/namespace=|workload=|10\.200\./.test(text), text);
  });

  test('with namespace labels: the peers\' namespaces, from the pod or the identity; \'\' for the world', async () => {
    const m = metrics('namespace');
    m.flows.record(...allowed());
    m.flows.record(...denyWorld());
    // A remote pod: no endpoint, its namespace from its identity's labels.
    m.flows.record(...allowed({ srcIdentity: 30020, srcEndpoint: 0, saddr: parseIp('10.201.0.20') }));
    const text = await m.text();
    assert.equal(sampleValue(text, 'tendril_flows_processed_total', { type: 'policy-verdict', verdict: 'forwarded', source_namespace: 'shop', destination_namespace: 'shop' }), 1);
    assert.equal(sampleValue(text, 'tendril_flows_processed_total', { type: 'policy-verdict', verdict: 'forwarded', source_namespace: 'billing', destination_namespace: 'shop' }), 1);
    assert.equal(sampleValue(text, 'tendril_policy_verdicts_total', { verdict: 'dropped', rule: NO_WORLD_TEXT, source_namespace: 'shop', destination_namespace: '' }), 1);
    assert.ok(!text.includes('workload='), 'namespace only');
  });

  test('with workload labels: the app label, else the pod name less its generated suffixes', async () => {
    const m = metrics('workload');
    m.flows.record(...allowed());
    m.flows.record(...allowed({ srcIdentity: 30020, srcEndpoint: 20 }));
    const text = await m.text();
    const labels = (s: string, sw: string) => ({ type: 'policy-verdict', source_namespace: s, destination_namespace: 'shop', source_workload: sw, destination_workload: 'postgres' });
    assert.equal(sampleValue(text, 'tendril_flows_processed_total', labels('shop', 'web')), 1);
    assert.equal(sampleValue(text, 'tendril_flows_processed_total', labels('billing', 'invoicer')), 1);
    assert.equal(workloadOfPodName('web-7d9f8b6c5-x2x4z'), 'web');
    assert.equal(workloadOfPodName('node-exporter-x2x4z'), 'node-exporter');
    assert.equal(workloadOfPodName('db-0'), 'db');
    assert.equal(workloadOfPodName('standalone'), 'standalone');
    assert.deepEqual(peerContext(['reserved:world'], undefined), { namespace: '', workload: '' });
  });

  test('past the cap, new rule texts and contexts fold into "other", and each folded event is counted', async () => {
    const m = metrics('namespace', 2);
    const ctx = context();
    // Three rule texts: unknown cookies each read as their own text.
    for (const cookie of [0x1001, 0x1002, 0x1003, 0x1003]) m.flows.record(...resolved({ cookie }, ctx));
    const text = await m.text();
    const verdicts = parseExposition(text).filter((s) => s.name === 'tendril_policy_verdicts_total');
    assert.equal(verdicts.length, 3, JSON.stringify(verdicts));
    assert.equal(verdicts.find((s) => s.labels.rule === 'other')?.value, 2);
    assert.equal(sampleValue(text, 'tendril_flow_metrics_folded_total', { label: 'rule' }), 2);

    // Contexts: two namespace pairs let in, the third folds.
    const c = metrics('namespace', 2);
    c.flows.record(...allowed());
    c.flows.record(...denyWorld());
    c.flows.record(...allowed({ srcIdentity: 30020, srcEndpoint: 0 }));
    c.flows.record(...allowed());
    const ct = await c.text();
    assert.equal(sampleValue(ct, 'tendril_flows_processed_total', { type: 'policy-verdict', verdict: 'forwarded', source_namespace: 'other', destination_namespace: 'other' }), 1);
    assert.equal(sampleValue(ct, 'tendril_flows_processed_total', { type: 'policy-verdict', verdict: 'forwarded', source_namespace: 'shop', destination_namespace: 'shop' }), 2);
    assert.equal(sampleValue(ct, 'tendril_flow_metrics_folded_total', { label: 'context' }), 1);
  });

  test('the agent\'s registry has them only when flow metrics are on', async () => {
    const on = new AgentMetrics({ flows: { labels: 'none' } });
    on.flows!.record(...trace());
    assert.equal(sampleValue(await on.render(), 'tendril_flows_processed_total', { type: 'trace' }), 1);
    const off = new AgentMetrics();
    assert.equal(off.flows, undefined);
    assert.ok(!(await off.render()).includes('tendril_flows_processed_total'));
  });
});
