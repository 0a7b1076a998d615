// Monitor events: decoding records with the contract's codec, resolving
// labels, interfaces and the rule behind a cookie against real parsed
// policies, filtering, the text line, and the hub that reads the pinned ring
// buffer only while a client listens.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { pino } from 'pino';
import { requireRoot } from '../../test/support/root.js';
import { DropReason, EventType, PolicyVerdict, ReservedCookie, TracePoint, TrafficDirection } from '../datapath/bpf/constants.js';
import { datapathEvent, type DatapathEvent, EVENT_SIZE } from '../datapath/bpf/layout.js';
import { ruleCookie } from '../datapath/bpf/ruleCookie.js';
import { createTestDatapathMaps, type TestDatapathMaps } from '../datapath/bpf/testing/inspectMaps.js';
import { encode } from '../datapath/kernel/bpf/codec.js';
import { parseIp } from '../netip/index.js';
import { SHOP_POLICIES, shopEvent } from './testing/shopPolicies.js';
import {
  agentMonitorContext,
  decodeRecord,
  formatEventLine,
  InterfaceNames,
  matchesFilter,
  type MonitorContext,
  type MonitorEvent,
  MonitorHub,
  pinnedRingBuffer,
  policyRuleOrigins,
  resolveEvent,
} from './index.js';

const POLICIES = SHOP_POLICIES;

const LABELS: Record<number, string[]> = { 2: ['reserved:world'], 30012: ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=shop'], 30013: ['k8s:app=db', 'k8s:io.kubernetes.pod.namespace=shop'] };

/** The names a netlink listing would give; the agent lists its own namespace's links. */
const INTERFACES = new InterfaceNames(async () => [{ index: 1, name: 'lo' }]);
before(() => INTERFACES.refresh());

function context(): MonitorContext {
  return agentMonitorContext({
    identityLabels: (id) => LABELS[id],
    policies: () => POLICIES,
    policyRevision: () => 1,
    interfaces: INTERFACES,
  });
}

const event = shopEvent;

const record = (e: DatapathEvent): Buffer => encode(datapathEvent, e);

describe('policies → cookies', () => {
  test('every peer rule of every policy is an origin a cookie can resolve to', () => {
    const origins = policyRuleOrigins(POLICIES).map((o) => `${o.policy} ${o.path}`);
    assert.deepEqual(origins.sort(), ['NetworkPolicy/shop/db-ingress spec.ingress[0]', 'TendrilNetworkPolicy/shop/no-world spec.egressDeny[0]']);
  });
});

describe('decoding and resolving', () => {
  const ctx = context();

  test('a local endpoint\'s pod and the service a flow was load-balanced for are named', () => {
    const named = agentMonitorContext({
      identityLabels: (id) => LABELS[id],
      policies: () => POLICIES,
      policyRevision: () => 1,
      interfaces: INTERFACES,
      endpointPod: (id) => (id === 12 ? { namespace: 'shop', name: 'web-7d9' } : undefined),
      serviceName: (id) => (id === 4 ? 'shop/db' : undefined),
    });
    const e = resolveEvent(decodeRecord(record(event({ service: 4 })))!, named)!;
    assert.deepEqual(e.source.pod, { namespace: 'shop', name: 'web-7d9' });
    assert.equal(e.destination.pod, undefined, 'an endpoint without a pod has none');
    assert.deepEqual(e.service, { id: 4, name: 'shop/db' });
    assert.deepEqual(resolveEvent(decodeRecord(record(event({ service: 9 })))!, named)!.service, { id: 9 }, 'a service gone keeps its ID');
    assert.equal(resolveEvent(decodeRecord(record(event({})))!, named)!.service, undefined, 'no service: none');
  });

  test('a policy drop with no matching rule: reason, peers with labels, interface, default deny', () => {
    const raw = decodeRecord(record(event({})));
    assert.ok(raw);
    const e = resolveEvent(raw, ctx)!;
    assert.equal(e.type, 'drop');
    assert.deepEqual(e.drop, { reason: 'POLICY', code: 133, text: DropReason.POLICY.text });
    assert.equal(e.direction, 'ingress');
    assert.deepEqual(e.source, { endpoint: 12, identity: 30012, labels: LABELS[30012], ip: '10.200.0.12', port: 40312 });
    assert.deepEqual(e.destination, { endpoint: 13, identity: 30013, labels: LABELS[30013], ip: '10.200.0.13', port: 5432 });
    assert.equal(e.protocol, 'tcp');
    assert.deepEqual(e.tcpFlags, ['SYN']);
    assert.deepEqual(e.interface, { ifindex: 1, name: 'lo' });
    assert.equal(e.length, 74);
    assert.deepEqual(e.rule, { cookie: 0, text: 'no rule allows (default deny)', origins: [] });
    assert.ok(Math.abs(Date.parse(e.time) - Date.now()) < 2000, e.time);
  });

  test('a default-deny drop names the rules that made the enforcing endpoint default-deny (the destination for ingress, the source for egress)', () => {
    const by = [{ policy: 'NetworkPolicy/shop/db-ingress', rule: 0, path: 'spec' }];
    const asked: Array<[number, string]> = [];
    const withEnforcement = agentMonitorContext({
      identityLabels: (id) => LABELS[id],
      policies: () => POLICIES,
      policyRevision: () => 1,
      interfaces: INTERFACES,
      enforcedBy: (endpoint, direction) => {
        asked.push([endpoint, direction]);
        return endpoint === 13 && direction === 'ingress' ? by : undefined;
      },
    });
    const drop = resolveEvent(event({}), withEnforcement)!;
    assert.deepEqual(drop.rule, { cookie: 0, text: 'no rule allows (default deny set by NetworkPolicy/shop/db-ingress spec)', origins: by });
    const verdict = resolveEvent(event({ type: EventType.POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: TrafficDirection.EGRESS }), withEnforcement)!;
    // Endpoint 12's egress is unknown to the agent: the plain reserved text.
    assert.equal(verdict.rule!.text, 'no rule allows (default deny)');
    assert.deepEqual(asked, [
      [13, 'ingress'],
      [12, 'egress'],
    ]);
  });

  test('a deny-rule drop names the rule by its cookie', () => {
    const cookie = ruleCookie({ policy: 'TendrilNetworkPolicy/shop/no-world', rule: 0, path: 'spec.egressDeny[0]' });
    const e = resolveEvent(
      event({ subtype: Math.abs(DropReason.POLICY_DENY.code), direction: TrafficDirection.EGRESS, dstEndpoint: 0, dstIdentity: 2, daddr: parseIp('1.1.1.1'), dport: 443, cookie }),
      ctx,
    )!;
    assert.equal(e.drop!.reason, 'POLICY_DENY');
    assert.equal(e.rule!.text, 'TendrilNetworkPolicy/shop/no-world spec.egressDeny[0]');
    assert.deepEqual(e.rule!.origins, [{ policy: 'TendrilNetworkPolicy/shop/no-world', rule: 0, path: 'spec.egressDeny[0]' }]);
    assert.deepEqual(e.destination, { identity: 2, labels: ['reserved:world'], ip: '1.1.1.1', port: 443 });
  });

  test('policy verdicts: allowed by a NetworkPolicy rule, and the reserved cookies', () => {
    const cookie = ruleCookie({ policy: 'NetworkPolicy/shop/db-ingress', rule: 0, path: 'spec.ingress[0]' });
    const allowed = resolveEvent(event({ type: EventType.POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, cookie }), ctx)!;
    assert.equal(allowed.type, 'policy-verdict');
    assert.equal(allowed.verdict, 'allowed');
    assert.equal(allowed.drop, undefined);
    assert.equal(allowed.rule!.text, 'NetworkPolicy/shop/db-ingress spec.ingress[0]');
    const texts = [ReservedCookie.NOT_ENFORCED, ReservedCookie.ALLOW_LOCALHOST].map((c) => resolveEvent(event({ type: EventType.POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, cookie: c }), ctx)!.rule!.text);
    assert.deepEqual(texts, ['not enforced', 'allow-localhost']);
    const noMatch = resolveEvent(event({ type: EventType.POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH }), ctx)!;
    assert.equal(noMatch.verdict, 'no-match');
    assert.equal(noMatch.rule!.text, 'no rule allows (default deny)');
    const gone = resolveEvent(event({ type: EventType.POLICY_VERDICT, subtype: PolicyVerdict.DENIED, cookie: 0xabcdef12 }), ctx)!;
    assert.match(gone.rule!.text, /unknown rule \(cookie 0xabcdef12/);
  });

  test('a non-policy drop carries no rule; a trace names its point; unknown identities have no labels', () => {
    const drop = resolveEvent(event({ subtype: Math.abs(DropReason.INVALID_SOURCE.code), cookie: 0, srcIdentity: 77777 }), ctx)!;
    assert.equal(drop.rule, undefined);
    assert.equal(drop.drop!.reason, 'INVALID_SOURCE');
    assert.deepEqual(drop.source.labels, []);
    const trace = resolveEvent(event({ type: EventType.TRACE, subtype: TracePoint.TO_ENDPOINT, proto: 1, tcpFlags: 0, sport: 9, dport: 9 }), ctx)!;
    assert.equal(trace.tracePoint, 'to-endpoint');
    assert.equal(trace.protocol, 'icmp');
    assert.equal(trace.tcpFlags, undefined);
    assert.equal(trace.rule, undefined);
  });

  test('records that are too short, of an unknown family or type are refused, not guessed', () => {
    assert.equal(decodeRecord(Buffer.alloc(EVENT_SIZE - 1)), undefined);
    const badFamily = record(event({}));
    badFamily.writeUInt8(5, 3);
    assert.equal(decodeRecord(badFamily), undefined);
    assert.equal(resolveEvent(event({ type: 9 }), ctx), undefined);
  });

  test('filters: by type, by endpoint on either side, by identity on either side, all together', () => {
    const e = resolveEvent(event({}), ctx)!;
    assert.ok(matchesFilter(e, {}));
    assert.ok(matchesFilter(e, { types: ['drop', 'trace'] }));
    assert.ok(!matchesFilter(e, { types: ['policy-verdict'] }));
    assert.ok(matchesFilter(e, { endpoint: 12 }) && matchesFilter(e, { endpoint: 13 }));
    assert.ok(!matchesFilter(e, { endpoint: 14 }));
    assert.ok(matchesFilter(e, { identity: 30013 }) && !matchesFilter(e, { identity: 2 }));
    assert.ok(matchesFilter(e, { types: ['drop'], endpoint: 13, identity: 30012 }));
    assert.ok(!matchesFilter(e, { types: ['drop'], endpoint: 13, identity: 2 }));
  });

  test('the overlay and ClusterIP refusals are named with their reason in the text line', () => {
    for (const [name, text] of [
      ['OVERLAY_NOT_NODE', 'overlay packet from a non-node'],
      ['CLUSTERIP_FROM_OUTSIDE', 'ClusterIP from outside'],
    ] as const) {
      const e = resolveEvent(event({ subtype: Math.abs(DropReason[name].code), cookie: 0 }), ctx)!;
      assert.deepEqual(e.drop, { reason: name, code: Math.abs(DropReason[name].code), text });
      assert.match(formatEventLine(e), new RegExp(` DROP \\(${name}: ${text}\\) `));
    }
  });

  test('the text line says what, the flow with endpoints, identities and labels, where, and the rule', () => {
    const e = resolveEvent(event({ tcpFlags: 0x12 }), ctx)!;
    const line = formatEventLine(e);
    assert.equal(
      line,
      `${e.time.slice(11, 23)} DROP (POLICY: policy denied: no rule allows this flow) ingress ` +
        '10.200.0.12:40312 [ep 12 id 30012 k8s:app=web k8s:io.kubernetes.pod.namespace=shop] -> 10.200.0.13:5432 [ep 13 id 30013 k8s:app=db k8s:io.kubernetes.pod.namespace=shop] ' +
        'tcp SYN,ACK on lo, 74 bytes; rule: no rule allows (default deny)',
    );
    const icmp = formatEventLine(resolveEvent(event({ type: EventType.TRACE, subtype: TracePoint.TO_STACK, proto: 1, sport: 7, dport: 7, ifindex: 999999, direction: 0 }), ctx)!);
    assert.match(icmp, / TRACE to-stack 10\.200\.0\.12 \[ep 12 id 30012 .*\] -> 10\.200\.0\.13 \[.*\] icmp id 7 on ifindex 999999, 74 bytes$/);
  });
});

describe('IPv6 events', () => {
  const ctx = context();
  const v6 = (over: Partial<DatapathEvent>) => event({ saddr: parseIp('fd00:200::12'), daddr: parseIp('fd00:200::13'), ...over });

  test('a record of family 6 decodes to the 16-byte addresses, written as IPv6', () => {
    const raw = record(v6({}));
    assert.equal(raw.readUInt8(3), 6, 'the family byte');
    const e = resolveEvent(decodeRecord(raw)!, ctx)!;
    assert.deepEqual(e.source, { endpoint: 12, identity: 30012, labels: LABELS[30012], ip: 'fd00:200::12', port: 40312 });
    assert.deepEqual(e.destination, { endpoint: 13, identity: 30013, labels: LABELS[30013], ip: 'fd00:200::13', port: 5432 });
  });

  test('the text line writes an IPv6 peer with a port as [addr]:port, and ICMPv6 with its echo id', () => {
    const e = resolveEvent(decodeRecord(record(v6({})))!, ctx)!;
    assert.equal(
      formatEventLine(e),
      `${e.time.slice(11, 23)} DROP (POLICY: policy denied: no rule allows this flow) ingress ` +
        '[fd00:200::12]:40312 [ep 12 id 30012 k8s:app=web k8s:io.kubernetes.pod.namespace=shop] -> [fd00:200::13]:5432 [ep 13 id 30013 k8s:app=db k8s:io.kubernetes.pod.namespace=shop] ' +
        'tcp SYN on lo, 74 bytes; rule: no rule allows (default deny)',
    );
    const udp = formatEventLine(resolveEvent(v6({ proto: 17, sport: 53, dport: 5353, type: EventType.TRACE, subtype: TracePoint.TO_ENDPOINT }), ctx)!);
    assert.match(udp, / \[fd00:200::12\]:53 \[ep 12 .*\] -> \[fd00:200::13\]:5353 \[ep 13 .*\] udp on lo/);
    const echo = formatEventLine(resolveEvent(v6({ proto: 58, sport: 9, dport: 9, type: EventType.TRACE, subtype: TracePoint.TO_STACK, direction: 0 }), ctx)!);
    assert.match(echo, / TRACE to-stack fd00:200::12 \[ep 12 .*\] -> fd00:200::13 \[.*\] icmpv6 id 9 on lo, 74 bytes$/);
  });
});

describe('MonitorHub over a pinned ring buffer', () => {
  requireRoot('the monitor hub tests');
  let maps: TestDatapathMaps;
  before(async () => {
    maps = await createTestDatapathMaps();
  });
  after(async () => {
    await maps?.remove();
  });

  test('reads only while a client is connected, resolves each record once and filters per client', async () => {
    const hub = new MonitorHub({ source: pinnedRingBuffer(`${maps.pinDir}/tendril_events`), context: context(), log: pino({ level: 'silent' }) });
    assert.equal(hub.stats().reading, false);
    const drops: MonitorEvent[] = [];
    const ep99: MonitorEvent[] = [];
    const a = await hub.subscribe({ types: ['drop'] }, (e) => drops.push(e));
    assert.equal(hub.stats().reading, true);
    const b = await hub.subscribe({ endpoint: 99 }, (e) => ep99.push(e));
    hub.handleRecords([record(event({})), record(event({ type: EventType.POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, dstEndpoint: 99 })), Buffer.alloc(10)]);
    assert.deepEqual(drops.map((e) => e.type), ['drop']);
    assert.deepEqual(ep99.map((e) => e.type), ['policy-verdict']);
    assert.deepEqual({ ...hub.stats() }, { subscribers: 2, reading: true, records: 3, undecodable: 1, stale: 0 });
    // What sat in the ring from before a client came is not shown to it as news.
    hub.handleRecords([record(event({ tsNs: process.hrtime.bigint() - 60_000_000_000n }))]);
    assert.equal(drops.length, 1);
    assert.equal(hub.stats().stale, 1);
    await a.close();
    assert.equal(hub.stats().reading, true, 'one client is left');
    await b.close();
    await b.close();
    assert.equal(hub.stats().reading, false, 'the last client out stops the reader');
    // And a new client starts it again.
    const c = await hub.subscribe({}, () => undefined);
    assert.equal(hub.stats().reading, true);
    await c.close();
    assert.equal(hub.stats().reading, false);
  });

  test('closing the hub ends every client with the reason', async () => {
    const hub = new MonitorHub({ source: pinnedRingBuffer(`${maps.pinDir}/tendril_events`), context: context(), log: pino({ level: 'silent' }) });
    const ended: string[] = [];
    await hub.subscribe({}, () => undefined, (r) => ended.push(r));
    await hub.subscribe({}, () => undefined, (r) => ended.push(r));
    await hub.close();
    assert.deepEqual(ended, ['the agent is stopping', 'the agent is stopping']);
    assert.deepEqual({ ...hub.stats(), records: 0 }, { subscribers: 0, reading: false, records: 0, undecodable: 0, stale: 0 });
  });

  test('a ring buffer that is not pinned fails the subscription and leaves nothing running', async () => {
    const hub = new MonitorHub({ source: pinnedRingBuffer(`${maps.pinDir}/tdl-missing`), context: context(), log: pino({ level: 'silent' }) });
    await assert.rejects(hub.subscribe({}, () => undefined), /ENOENT|No such file/);
    assert.deepEqual({ ...hub.stats() }, { subscribers: 0, reading: false, records: 0, undecodable: 0, stale: 0 });
  });
});
