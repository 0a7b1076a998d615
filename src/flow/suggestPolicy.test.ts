// The flow map's workloads and edges, and "suggest a policy": the suggested
// NetworkPolicy, parsed by tendril's own policy parser and traced by the
// reference evaluator, allows every flow it was made from and nothing else.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parse } from 'yaml';
import { LabelSet } from '../labels/index.js';
import type { MonitorEvent, MonitorPeer } from '../monitor/index.js';
import { parsePolicyText, traceFlow } from '../policy/index.js';
import { buildFlowMap, type Flow, foldKey, type FlowVerdict, flowVerdictOf, SuggestPolicyError, suggestPolicy, workloadOf } from './index.js';

const ns = (n: string) => `k8s:io.kubernetes.pod.namespace=${n}`;
const pod = (namespace: string, name: string, identity: number, app: string, ip: string, port = 40000): MonitorPeer => ({
  endpoint: identity - 30000,
  pod: { namespace, name },
  identity,
  labels: [`k8s:app=${app}`, ns(namespace), 'k8s:io.tendril.k8s.policy.serviceaccount=default', `k8s:io.tendril.k8s.namespace.labels.kubernetes.io/metadata.name=${namespace}`],
  ip,
  port,
});
const WEB = pod('shop', 'web-1', 30001, 'web', '10.0.0.1');
const WEB2 = pod('shop', 'web-2', 30001, 'web', '10.0.0.2');
const API = pod('shop', 'api-1', 30002, 'api', '10.0.0.3', 8080);
const DB = pod('shop', 'db-0', 30003, 'db', '10.0.0.4', 5432);
const BATCH = pod('jobs', 'batch-1', 30004, 'batch', '10.0.1.1');
const WORLD: MonitorPeer = { identity: 16777217, labels: ['reserved:world', 'cidr:203.0.113.0/24'], ip: '203.0.113.9', port: 443 };
const HOST: MonitorPeer = { identity: 1, labels: ['reserved:host'], ip: '10.0.0.254', port: 33000 };
const REMOTE: MonitorPeer = { identity: 6, labels: ['reserved:remote-node'], ip: '192.0.2.7', port: 33000 };

let clock = Date.parse('2026-11-29T12:00:00.000Z');
function flow(source: MonitorPeer, destination: MonitorPeer, over: Partial<MonitorEvent> & { count?: number } = {}): Flow {
  clock += 10;
  const { count, ...ev } = over;
  const event: MonitorEvent = {
    type: 'policy-verdict',
    verdict: 'allowed',
    time: new Date(clock).toISOString(),
    direction: 'ingress',
    source,
    destination,
    protocol: 'tcp',
    tcpFlags: ['SYN'],
    interface: { ifindex: 7 },
    length: 74,
    ...ev,
  };
  return { node: 'node-a', verdict: flowVerdictOf(event), count: count ?? 1, firstTime: event.time, event };
}
const to = (p: MonitorPeer, port: number): MonitorPeer => ({ ...p, port });
const dropRule = { cookie: 9, text: 'NetworkPolicy/shop/api spec.ingress[0]', origins: [{ policy: 'NetworkPolicy/shop/api', rule: 0, path: 'spec.ingress' }] };
const dropped = (s: MonitorPeer, d: MonitorPeer): Flow => flow(s, d, { type: 'drop', verdict: undefined as never, drop: { reason: 'POLICY', code: 133, text: 'policy denied' }, rule: dropRule });

describe('workloads', () => {
  test('a workload is an identity, named by namespace and app label; reserved identities are their own', () => {
    assert.deepEqual([workloadOf(WEB).key, workloadOf(WEB).namespace, workloadOf(WEB).name], ['id:30001', 'shop', 'web']);
    assert.equal(workloadOf(WEB2).key, workloadOf(WEB).key, 'two pods of one identity are one workload');
    assert.equal(workloadOf(WORLD).key, 'world', 'a CIDR identity is the world');
    assert.equal(workloadOf({ ...WORLD, identity: 2, labels: ['reserved:world'] }).key, 'world');
    assert.equal(workloadOf(HOST).key, 'host');
    assert.equal(workloadOf(REMOTE).key, 'remote-node');
    const remotePod: MonitorPeer = { identity: 40000, labels: ['k8s:name=ledger', ns('bank')], ip: '10.9.0.1', port: 1 };
    assert.deepEqual([workloadOf(remotePod).namespace, workloadOf(remotePod).name], ['bank', 'ledger'], 'a remote pod by its labels');
    const unlabeled: MonitorPeer = { identity: 40001, pod: { namespace: 'x', name: 'lonely' }, labels: [ns('x')], ip: '10.9.0.2', port: 1 };
    assert.equal(workloadOf(unlabeled).name, 'lonely');
  });
});

describe('the flow map', () => {
  test('edges per source, destination and verdict with counts summed; the one-namespace view keeps its peers', () => {
    const flows = [flow(WEB, to(API, 8080), { count: 3 }), flow(WEB2, to(API, 8080), { count: 2 }), dropped(BATCH, to(API, 8080)), flow(API, to(DB, 5432)), flow(WORLD, to(WEB, 443))];
    const m = buildFlowMap(flows);
    assert.deepEqual(m.namespaces, ['jobs', 'shop']);
    assert.deepEqual([...m.workloads.keys()].sort(), ['id:30001', 'id:30002', 'id:30003', 'id:30004', 'world']);
    const webApi = m.edges.find((e) => e.from === 'id:30001' && e.to === 'id:30002')!;
    assert.deepEqual([webApi.verdict, webApi.count, webApi.flows, [...webApi.ports]], ['forwarded', 5, 2, [['tcp/8080', 5]]]);
    const drop = m.edges.find((e) => e.verdict === 'dropped')!;
    assert.deepEqual([drop.from, drop.to, [...drop.rules]], ['id:30004', 'id:30002', [[dropRule.text, 1]]]);
    const jobs = buildFlowMap(flows, { namespace: 'jobs' });
    assert.deepEqual(jobs.edges.map((e) => e.key), [drop.key]);
    assert.deepEqual([...jobs.workloads.keys()].sort(), ['id:30002', 'id:30004']);
  });

  test('10,000 flows over 200 workloads aggregate in a fraction of a second', () => {
    const peers = Array.from({ length: 200 }, (_, i) => pod(`ns-${i % 10}`, `w-${i}`, 31000 + i, `w${i}`, `10.1.${i >> 8}.${i & 255}`));
    const flows = Array.from({ length: 10_000 }, (_, i) => flow(peers[i % 200]!, to(peers[(i * 7 + 3) % 200]!, 80 + (i % 5)), i % 13 === 0 ? { verdict: 'denied' } : {}));
    const t0 = performance.now();
    const m = buildFlowMap(flows);
    const ms = performance.now() - t0;
    assert.equal(m.workloads.size, 200);
    assert.equal(m.edges.reduce((s, e) => s + e.count, 0), 10_000);
    // ~40 ms on an idle core; the bound leaves room for a machine shared with other builds.
    assert.ok(ms < 1000, `${ms} ms`);
  });
});

/** What tendril's reference evaluator says of `src` → `dst` on tcp/`port` under `yaml` alone. */
function verdictUnder(yaml: string, src: MonitorPeer, dst: MonitorPeer, port: number, proto = 6): string {
  const rules = parsePolicyText(yaml).flatMap((p) => p.rules);
  const labels = (p: MonitorPeer) => ({ labels: LabelSet.parse(p.labels) });
  return traceFlow({ rules, mode: 'default', allowLocalhost: true, egressNamedPorts: [] }, labels(src), labels(dst), proto, port).verdict;
}

describe('suggestPolicy', () => {
  const seen = [
    flow(WEB, to(API, 8080), { count: 4 }),
    flow(WEB2, to(API, 8080)),
    flow(WEB, to(API, 9090)),
    flow(BATCH, to(API, 8080)),
    flow(WORLD, to(API, 443), { direction: 'ingress' }),
    flow(API, to(DB, 5432), { direction: 'egress' }),
    flow(API, to(WORLD, 443), { direction: 'egress' }),
    flow(WEB, to(API, 0), { protocol: 'icmp', tcpFlags: undefined }),
    flow(HOST, to(API, 8080)),
    dropped(DB, to(API, 8080)),
    flow(WEB, to(DB, 5432)),
  ];

  test('a NetworkPolicy naming each peer by labels, the world by address, with the ports seen', () => {
    const s = suggestPolicy(seen, 'id:30002');
    const doc = parse(s.yaml) as typeof s.document;
    assert.deepEqual(doc, s.document, 'the YAML is the document');
    assert.deepEqual(doc.metadata, { name: 'api-observed', namespace: 'shop' });
    assert.deepEqual(doc.spec.podSelector, { matchLabels: { app: 'api' } });
    assert.deepEqual(doc.spec.policyTypes, ['Ingress', 'Egress']);
    assert.deepEqual(doc.spec.ingress, [
      { from: [{ ipBlock: { cidr: '203.0.113.9/32' } }], ports: [{ protocol: 'TCP', port: 443 }] },
      { from: [{ podSelector: { matchLabels: { app: 'batch' } }, namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'jobs' } } }], ports: [{ protocol: 'TCP', port: 8080 }] },
      { from: [{ podSelector: { matchLabels: { app: 'web' } } }], ports: [{ protocol: 'TCP', port: 8080 }, { protocol: 'TCP', port: 9090 }] },
    ]);
    assert.deepEqual(doc.spec.egress, [
      { to: [{ ipBlock: { cidr: '203.0.113.9/32' } }], ports: [{ protocol: 'TCP', port: 443 }] },
      { to: [{ podSelector: { matchLabels: { app: 'db' } } }], ports: [{ protocol: 'TCP', port: 5432 }] },
    ]);
    assert.equal(s.flows, 7);
    assert.ok(s.notes.some((n) => /icmp from shop\/web/.test(n)), s.notes.join('\n'));
    assert.ok(s.notes.some((n) => /host .*cannot select a node/.test(n)), s.notes.join('\n'));
    assert.ok(!s.yaml.includes('db-0') && !s.notes.some((n) => /shop\/db.*8080/.test(n)), 'the dropped flow is not allowed, nor mentioned');
    assert.match(s.yaml, /^# Suggested from 7 flows of shop\/api \(identity 30002\)/);
  });

  test('tendril parses it, and it allows the flows seen and nothing else', () => {
    const { yaml } = suggestPolicy(seen, 'id:30002');
    assert.equal(verdictUnder(yaml, WEB, API, 8080), 'allow');
    assert.equal(verdictUnder(yaml, WEB2, API, 9090), 'allow', 'the other pod of the same workload');
    assert.equal(verdictUnder(yaml, WEB, API, 8081), 'deny', 'a port not seen');
    assert.equal(verdictUnder(yaml, DB, API, 8080), 'deny', 'the refused peer');
    assert.equal(verdictUnder(yaml, API, DB, 5432), 'allow');
    assert.equal(verdictUnder(yaml, API, DB, 5433), 'deny');
    assert.equal(verdictUnder(yaml, API, WEB, 80), 'deny', 'egress to a peer never reached');
    assert.equal(verdictUnder(yaml, WEB, DB, 5432), 'allow', 'a flow between others is none of this policy\'s business');
  });

  test('options: one direction, dropped flows included, a name', () => {
    const s = suggestPolicy(seen, 'id:30002', { directions: ['ingress'], verdicts: ['forwarded', 'dropped'], name: 'api-allow' });
    assert.deepEqual(s.document.spec.policyTypes, ['Ingress']);
    assert.equal(s.document.spec.egress, undefined);
    assert.equal(s.document.metadata.name, 'api-allow');
    assert.equal(verdictUnder(s.yaml, DB, API, 8080), 'allow', 'the refused flow, now allowed');
    const none = suggestPolicy([flow(WEB, to(DB, 5432))], 'id:30001', { directions: ['ingress'] });
    assert.deepEqual(none.document.spec, { podSelector: { matchLabels: { app: 'web' } }, policyTypes: ['Ingress'] });
    assert.ok(none.notes.includes('ingress: nothing seen, so nothing is allowed'));
  });

  test('a reply traced at trace level all does not make its sender a client', () => {
    const reply = flow(API, to(WEB, 40000), { type: 'trace', verdict: undefined as never, tracePoint: 'to-endpoint', tcpFlags: ['SYN', 'ACK'] });
    const s = suggestPolicy([reply], 'id:30002', { directions: ['egress'] });
    assert.equal(s.document.spec.egress, undefined);
    assert.equal(s.flows, 0);
  });

  test('no pod workload, no labels, nothing seen: a clear error', () => {
    assert.throws(() => suggestPolicy(seen, 'world'), (e: unknown) => e instanceof SuggestPolicyError && /no pod workload/.test(e.message));
    assert.throws(() => suggestPolicy(seen, 'id:99999'), /no flow to or from id:99999/);
    const bare: MonitorPeer = { identity: 30050, labels: [], pod: { namespace: 'x', name: 'y' }, ip: '10.0.0.50', port: 1 };
    assert.throws(() => suggestPolicy([flow(WEB, to(bare, 80))], 'id:30050'), /pod labels are unknown/);
  });

  test('the UI keys a folded flow sent again as the same flow', () => {
    const a = flow(WEB, to(API, 8080));
    const verdict: FlowVerdict = a.verdict;
    assert.equal(foldKey(a.event, verdict), foldKey({ ...a.event, time: new Date(clock + 5).toISOString() }, verdict));
  });
});
