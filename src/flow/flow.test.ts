// The flow history (folding repeats, eviction, `last`), the filters shared by
// `tendril observe`, GET /v1/flows and the relay, and the compact line.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { MonitorEvent, MonitorPeer } from '../monitor/index.js';
import { type Flow, FlowFilterError, FlowRing, type FoldHash, flowVerdictOf, formatFlowLine, matchesFlow, parseFlowFilter, parseFlowTime } from './index.js';
import { FIXED_FLOW_CLOCK, recordEvent } from './testing/recordEvent.js';
import { pino } from 'pino';
import { EventType, TracePoint } from '../datapath/bpf/constants.js';
import { datapathEvent } from '../datapath/bpf/layout.js';
import { encode } from '../datapath/kernel/bpf/codec.js';
import { agentMonitorContext, InterfaceNames, MonitorHub } from '../monitor/index.js';
import { SHOP_POLICIES, shopEvent } from '../monitor/testing/shopPolicies.js';

const WEB: MonitorPeer = { endpoint: 12, pod: { namespace: 'shop', name: 'web-7d9' }, identity: 30012, labels: ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=shop'], ip: '10.0.0.12', port: 40312 };
const DB: MonitorPeer = { endpoint: 13, pod: { namespace: 'shop', name: 'db-0' }, identity: 30013, labels: ['k8s:app=db', 'k8s:io.kubernetes.pod.namespace=shop'], ip: '10.0.0.13', port: 5432 };
const REMOTE_API: MonitorPeer = { identity: 40001, labels: ['k8s:app=api', 'k8s:io.kubernetes.pod.namespace=billing'], ip: '10.1.0.7', port: 8080 };
const WORLD: MonitorPeer = { identity: 2, labels: ['reserved:world'], ip: '203.0.113.9', port: 443 };

let clock = Date.parse('2026-11-29T12:00:00.000Z');
function event(over: Partial<MonitorEvent> = {}): MonitorEvent {
  clock += 10;
  return {
    type: 'policy-verdict',
    verdict: 'allowed',
    time: new Date(clock).toISOString(),
    direction: 'egress',
    source: WEB,
    destination: DB,
    protocol: 'tcp',
    tcpFlags: ['SYN'],
    interface: { ifindex: 7, name: 'lxc12' },
    length: 74,
    ...over,
  };
}

const denied = (sport: number): MonitorEvent =>
  event({ type: 'drop', verdict: undefined as never, drop: { reason: 'POLICY_DENY', code: 181, text: 'policy denied by a deny rule' }, source: { ...WEB, port: sport }, rule: { cookie: 77, text: 'NetworkPolicy/shop/db spec.ingress[0]', origins: [] } });

describe('flow verdicts', () => {
  test('drops and refusals are dropped, allows and traces forwarded, staged and audit verdicts their own', () => {
    assert.equal(flowVerdictOf(event()), 'forwarded');
    assert.equal(flowVerdictOf(event({ verdict: 'denied' })), 'dropped');
    assert.equal(flowVerdictOf(event({ verdict: 'no-match' })), 'dropped');
    assert.equal(flowVerdictOf(denied(1)), 'dropped');
    assert.equal(flowVerdictOf(event({ type: 'trace', tracePoint: 'to-endpoint' })), 'forwarded');
    assert.equal(flowVerdictOf(event({ verdict: 'would-drop' as never })), 'would-drop');
    assert.equal(flowVerdictOf(event({ verdict: 'audit' as never })), 'audit');
  });
});

describe('FlowRing', () => {
  test('a flood of one dropped flow from random ports folds into one flow and evicts nothing', () => {
    const ring = new FlowRing({ capacity: 4, node: 'node-a', clock: FIXED_FLOW_CLOCK });
    const kept = [event({ source: { ...WEB, port: 1 } }), event({ source: { ...WEB, port: 2 } })];
    for (const e of kept) recordEvent(ring, e);
    for (let i = 0; i < 10_000; i++) recordEvent(ring, denied(20_000 + (i % 30_000)));
    const flows = ring.list();
    assert.equal(flows.length, 3);
    assert.deepEqual(
      flows.slice(0, 2),
      kept.map((e) => ({ node: 'node-a', verdict: 'forwarded', count: 1, firstTime: e.time, event: e })),
      'each read back as recorded',
    );
    const flood = flows[2]!;
    assert.equal(flood.count, 10_000);
    assert.equal(flood.verdict, 'dropped');
    assert.equal(flood.node, 'node-a');
    assert.ok(flood.firstTime < flood.event.time, 'first and last time kept');
    assert.deepEqual(ring.stats(), { capacity: 4, size: 3, events: 10_002, folded: 9_999, evicted: 0 });
  });

  test('forwarded connections keep their source port: each is its own flow, the oldest evicted first', () => {
    const ring = new FlowRing({ capacity: 3, node: 'n', clock: FIXED_FLOW_CLOCK });
    for (let port = 1; port <= 5; port++) recordEvent(ring, event({ source: { ...WEB, port } }));
    assert.deepEqual(
      ring.list().map((f) => f.event.source.port),
      [3, 4, 5],
    );
    assert.equal(ring.stats().evicted, 2);
  });

  test('a folded flow moves to the newest end; last N are the newest that pass', () => {
    const ring = new FlowRing({ capacity: 10, node: 'n', clock: FIXED_FLOW_CLOCK });
    recordEvent(ring, denied(1));
    recordEvent(ring, event({ source: { ...WEB, port: 5 } }));
    recordEvent(ring, denied(2));
    const all = ring.list();
    assert.deepEqual(
      all.map((f) => [f.verdict, f.count]),
      [
        ['forwarded', 1],
        ['dropped', 2],
      ],
    );
    assert.deepEqual(
      ring.list((f) => f.verdict === 'forwarded', 1).map((f) => f.event.source.port),
      [5],
    );
    assert.deepEqual(ring.list(() => true, 0), []);
    assert.equal(ring.list(() => true, 1)[0]!.verdict, 'dropped');
  });

  // With its own hash, and with one under which every flow collides (what a pod crafting flows for one run of the
  // table would aim at): the table's probing and deletion keep every flow apart and findable.
  const hashes: Array<[string, FoldHash | undefined]> = [
    ['the seeded hash', undefined],
    ['a hash under which all flows collide', () => 7],
  ];
  for (const [name, foldHash] of hashes) {
    test(`over many evictions and folds the history holds the newest flows in recording order, as a plain list would (${name})`, () => {
      const ring = new FlowRing({ capacity: 50, node: 'node-a', clock: FIXED_FLOW_CLOCK, ...(foldHash ? { foldHash } : {}) });
      // The model: keys, oldest first; a fold moves its key to the end.
      const model: number[] = [];
      let seed = 7;
      for (let i = 0; i < 20_000; i++) {
        seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff;
        // Mostly repeats of 80 ports (folds), sometimes a new one.
        const port = seed % 10 === 0 ? 1000 + i : 1 + (seed % 80);
        recordEvent(ring, event({ source: { ...WEB, port } }));
        const at = model.indexOf(port);
        if (at >= 0) model.splice(at, 1);
        else if (model.length === 50) model.shift();
        model.push(port);
      }
      assert.deepEqual(
        ring.list().map((f) => f.event.source.port),
        model,
      );
      assert.equal(ring.stats().size, 50);
    });
  }

  test('listeners get every flow recorded, folded ones with their new count', () => {
    const ring = new FlowRing({ capacity: 10, node: 'n', clock: FIXED_FLOW_CLOCK });
    const seen: number[] = [];
    const stop = ring.listen((f) => seen.push(f.count));
    recordEvent(ring, denied(1));
    recordEvent(ring, denied(2));
    stop();
    recordEvent(ring, denied(3));
    assert.deepEqual(seen, [1, 2]);
  });

  test('a flow read after its pod went, its endpoint number was reused and its identity released is told as it happened', () => {
    const pods = new Map<number, { namespace: string; name: string }>([[12, { namespace: 'shop', name: 'web-7d9' }]]);
    const labels = new Map<number, readonly string[]>([[30012, ['k8s:app=web']]]);
    const interfaces = new InterfaceNames(async () => []);
    const context = agentMonitorContext({ identityLabels: (id) => labels.get(id), policies: () => SHOP_POLICIES, policyRevision: () => 1, interfaces, endpointPod: (id) => pods.get(id) });
    const ring = new FlowRing({ capacity: 10, node: 'n' });
    const hub = new MonitorHub({ source: { open: () => ({ stop: async () => undefined }) }, context, log: pino({ level: 'silent' }), record: (r, h, refs) => ring.record(r, h, refs) });
    hub.handleRecords([encode(datapathEvent, shopEvent({ type: EventType.TRACE, subtype: TracePoint.TO_ENDPOINT }))]);
    pods.set(12, { namespace: 'other', name: 'reused-0' });
    labels.delete(30012);
    const [flow] = ring.list();
    assert.deepEqual(flow?.event.source.pod, { namespace: 'shop', name: 'web-7d9' });
    assert.deepEqual(flow?.event.source.labels, ['k8s:app=web']);
    assert.equal(flow?.event.tracePoint, 'to-endpoint');
    assert.equal(hub.stats().undecodable, 0);
  });

  test('a capacity that is no positive integer is refused', () => {
    assert.throws(() => new FlowRing({ capacity: 0, node: 'n', clock: FIXED_FLOW_CLOCK }), RangeError);
    assert.throws(() => new FlowRing({ capacity: 1.5, node: 'n' }), RangeError);
  });
});

describe('flow filters', () => {
  const flow = (e: MonitorEvent, node = 'node-a'): Flow => ({ node, verdict: flowVerdictOf(e), count: 1, firstTime: e.time, event: e });
  const webToDb = flow(event());
  const webToApi = flow(event({ destination: REMOTE_API, service: { id: 4, name: 'billing/api' } }));
  const worldToWeb = flow(event({ source: WORLD, destination: { ...WEB, port: 80 }, direction: 'ingress', verdict: 'denied' }), 'node-b');
  const all = [webToDb, webToApi, worldToWeb];
  const pick = (params: Record<string, string | string[]>) => all.filter((f) => matchesFlow(f, parseFlowFilter(params)));

  test('pod: namespace/name prefix, or a name prefix in any namespace; either side or one side', () => {
    assert.deepEqual(pick({ pod: 'shop/db' }), [webToDb]);
    assert.deepEqual(pick({ pod: 'web' }), all);
    assert.deepEqual(pick({ 'from-pod': 'shop/web' }), [webToDb, webToApi]);
    assert.deepEqual(pick({ 'to-pod': 'shop/web' }), [worldToWeb]);
    assert.deepEqual(pick({ pod: 'other/web' }), []);
  });

  test('namespace: a pod\'s, else the identity\'s namespace label (remote pods)', () => {
    assert.deepEqual(pick({ 'to-namespace': 'billing' }), [webToApi]);
    assert.deepEqual(pick({ namespace: 'billing' }), [webToApi]);
    assert.deepEqual(pick({ 'from-namespace': 'shop' }), [webToDb, webToApi]);
  });

  test('labels with or without their source, with or without a value', () => {
    assert.deepEqual(pick({ 'to-label': 'app=db' }), [webToDb]);
    assert.deepEqual(pick({ 'to-label': 'k8s:app=api' }), [webToApi]);
    assert.deepEqual(pick({ 'to-label': 'k8s:app' }), [webToDb, webToApi, worldToWeb]);
    assert.deepEqual(pick({ 'from-label': 'reserved:world' }), [worldToWeb]);
    assert.deepEqual(pick({ label: 'container:app=db' }), []);
  });

  test('identity, IP or CIDR, port, service', () => {
    assert.deepEqual(pick({ 'from-identity': '2' }), [worldToWeb]);
    assert.deepEqual(pick({ ip: '10.1.0.0/16' }), [webToApi]);
    assert.deepEqual(pick({ 'from-ip': '203.0.113.9' }), [worldToWeb]);
    assert.deepEqual(pick({ 'to-port': '5432' }), [webToDb]);
    assert.deepEqual(pick({ service: 'billing/api' }), [webToApi]);
    assert.deepEqual(pick({ 'to-service': 'api' }), [webToApi]);
    assert.deepEqual(pick({ 'from-service': 'api' }), [], 'a flow goes to a service, never from one');
  });

  test('values of one filter are alternatives, different filters must all hold', () => {
    assert.deepEqual(pick({ 'to-port': ['5432', '80'] }), [webToDb, worldToWeb]);
    assert.deepEqual(pick({ 'to-port': '5432,80' }), [webToDb, worldToWeb]);
    assert.deepEqual(pick({ 'to-port': ['5432', '80'], verdict: 'dropped' }), [worldToWeb]);
    assert.deepEqual(pick({ pod: 'shop/web', ip: '10.0.0.13' }), [webToDb]);
  });

  test('verdict, protocol, type, node, time window', () => {
    assert.deepEqual(pick({ verdict: 'forwarded' }), [webToDb, webToApi]);
    assert.deepEqual(pick({ protocol: 'UDP' }), []);
    assert.deepEqual(pick({ type: 'policy-verdict' }), all);
    assert.deepEqual(pick({ node: 'node-b' }), [worldToWeb]);
    assert.deepEqual(pick({ since: webToApi.event.time }), [webToApi, worldToWeb]);
    assert.deepEqual(pick({ until: webToApi.event.time }), [webToDb, webToApi]);
  });

  test('bad values and unknown filters are refused, naming them', () => {
    const refused = (params: Record<string, string>, re: RegExp) => assert.throws(() => parseFlowFilter(params), (err: unknown) => err instanceof FlowFilterError && re.test(err.message));
    refused({ verdict: 'maybe' }, /--verdict must be one of forwarded, dropped/);
    refused({ 'to-port': '70000' }, /--to-port must be a number from 0 to 65535/);
    refused({ ip: '10.0.0.300' }, /--ip: "10.0.0.300" is not an IP address or CIDR/);
    refused({ pod: 'a/b/c' }, /--pod: "a\/b\/c" is not \[namespace\/\]name/);
    refused({ namespace: 'Shop' }, /--namespace: "Shop" is not a Kubernetes name/);
    refused({ since: 'yesterday' }, /--since: "yesterday" is neither an ISO 8601 time/);
    refused({ since: '1m', until: '2m' }, /--since .* is after --until/);
    refused({ colour: 'red' }, /unknown flow filter "colour"/);
    refused({ label: 'a b' }, /--label: "a b" is not \[source:\]key\[=value\]/);
  });

  test('relative times count back from now', () => {
    const now = new Date('2026-11-29T12:00:00.000Z');
    assert.equal(parseFlowTime('since', '10m', now).toISOString(), '2026-11-29T11:50:00.000Z');
    assert.equal(parseFlowTime('since', '2h', now).toISOString(), '2026-11-29T10:00:00.000Z');
    assert.equal(parseFlowTime('since', '2026-11-29T11:00:00Z', now).toISOString(), '2026-11-29T11:00:00.000Z');
  });
});

describe('the compact line', () => {
  test('pods by name, other peers by address and what they are, the verdict, the rule and the count', () => {
    const ring = new FlowRing({ capacity: 10, node: 'node-a', clock: FIXED_FLOW_CLOCK });
    recordEvent(ring, event({ source: WORLD, destination: { ...WEB, port: 80 }, direction: 'ingress', type: 'drop', drop: { reason: 'POLICY', code: 133, text: 'policy denied: no rule allows this flow' }, rule: { cookie: 0, text: 'no rule allows (default deny)', origins: [] } }));
    recordEvent(ring, event({ source: { ...WORLD, port: 444 }, destination: { ...WEB, port: 80 }, direction: 'ingress', type: 'drop', drop: { reason: 'POLICY', code: 133, text: 'policy denied: no rule allows this flow' }, rule: { cookie: 0, text: 'no rule allows (default deny)', origins: [] } }));
    const [f] = ring.list();
    assert.ok(f);
    const line = formatFlowLine(f);
    assert.match(line, /^Nov 29 12:\d\d:\d\d\.\d{3} 203\.0\.113\.9:444 \(ID:2 world\) -> shop\/web-7d9:80 \(ID:30012\) drop \(POLICY\) ingress DROPPED tcp SYN; policy denied: no rule allows this flow; rule: no rule allows \(default deny\) ×2$/);
    assert.ok(formatFlowLine(f, { color: true }).includes('\u001b[31mDROPPED\u001b[0m'), 'red on a terminal');
    assert.match(formatFlowLine(f, { showNode: true }), / \[node-a\] /);
    const svc = formatFlowLine({ node: 'n', verdict: 'forwarded', count: 1, firstTime: '', event: event({ destination: REMOTE_API, service: { id: 4, name: 'billing/api' } }) });
    assert.match(svc, /-> 10\.1\.0\.7:8080 \(ID:40001 billing\/api\) to-service billing\/api policy-verdict egress FORWARDED/);
  });
});
