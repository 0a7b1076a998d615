/**
 * Staged policies and audit mode in bpf_lxc.o (BPF_PROG_TEST_RUN): an
 * endpoint flagged ENDPOINT_F_STAGED has its staged view looked up on new
 * flows beside the enforced policy, and a difference is reported
 * (WOULD_DROP, WOULD_ALLOW) without changing what passes; with
 * CONFIG_F_POLICY_AUDIT a policy refusal is reported as AUDIT and passes.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { TcAction } from '../kernel/bpf/index.js';
import { ConfigFlag, DropReason, EndpointFlag, EventType, PolicyVerdict, ReservedCookie, TraceLevel, TrafficDirection } from './constants.js';
import { assertEvents } from './testing/expect.js';
import { parseIp } from '../../netip/index.js';
import { IDENTITY, installNode, NODE_IP, POD_A, POD_B } from './testing/fixtures.js';
import { IpProto, TcpFlag, tcpFrame } from './testing/packets.js';
import { LXC_OBJECT, ProgramHarness } from './testing/programHarness.js';
import type { MapEntry } from '../../policy/index.js';
import { EndpointMap } from './endpointMap.js';
import { PolicyMapWriter } from './policyMapWriter.js';
import { ruleCookie } from './ruleCookie.js';

requireRoot('the staged policy and audit mode program tests');

const FROM = 'tendril_from_container';
const TO = 'tendril_to_container';
const { DROP, POLICY_VERDICT } = EventType;
const { INGRESS, EGRESS } = TrafficDirection;
const code = (r: keyof typeof DropReason): number => -DropReason[r].code;
const COOKIE = { ALLOW_ALL: 0x1001, STAGED_80: 0x2002, STAGED_DENY: 0x3003 };

const synAtoB = (dport: number, sport = 40000) => tcpFrame({ srcMac: POD_A.podMac, dstMac: POD_A.lxcMac, src: POD_A.ip, dst: POD_B.ip, sport, dport, flags: TcpFlag.SYN });
const ct = (h: ProgramHarness, dport: number, sport = 40000) => h.ct({ saddr: POD_A.ip, daddr: POD_B.ip, sport, dport, proto: IpProto.TCP });

/** bpf_lxc with the node's endpoints; with `bIngressOpen` B's ingress is not enforced, so only A's egress decides. */
async function openHarness(bIngressOpen: boolean): Promise<ProgramHarness> {
  const h = await ProgramHarness.load(LXC_OBJECT);
  installNode(h);
  if (bIngressOpen) h.addPolicy({ endpointId: POD_B.endpointId, identity: 0, egress: false, cookie: ReservedCookie.NOT_ENFORCED });
  return h;
}

describe('bpf_lxc staged policies', () => {
  let h: ProgramHarness;
  beforeEach(async () => (h = await openHarness(true)));
  afterEach(async () => h?.close());

  /** Enforced: A may send anywhere. Staged view: A may send to B on TCP/80 only. */
  function enforcedAllowAllStaged80(): void {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: true, cookie: COOKIE.ALLOW_ALL });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: true, proto: IpProto.TCP, port: 80, cookie: COOKIE.STAGED_80, staged: true });
  }

  it('reports WOULD_DROP for a flow only the staged view refuses, and lets it pass with its conntrack entry', async () => {
    enforcedAllowAllStaged80();
    h.addEndpoint({ ...POD_A, flags: EndpointFlag.STAGED });
    assert.equal((await h.run(FROM, synAtoB(80))).retval, TcAction.REDIRECT);
    assertEvents(await h.takeEvents(), [{ type: POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, direction: EGRESS, cookie: COOKIE.ALLOW_ALL, dport: 80 }]);
    assert.equal((await h.run(FROM, synAtoB(8080))).retval, TcAction.REDIRECT);
    assertEvents(await h.takeEvents(), [
      { type: POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, direction: EGRESS, cookie: COOKIE.ALLOW_ALL, dport: 8080 },
      { type: POLICY_VERDICT, subtype: PolicyVerdict.WOULD_DROP, direction: EGRESS, cookie: ReservedCookie.NONE, dport: 8080, srcEndpoint: POD_A.endpointId, dstIdentity: IDENTITY.B },
    ]);
    assert.ok(ct(h, 80));
    assert.ok(ct(h, 8080), 'the flow the staged view refuses still gets its conntrack entry');
    // The flow's next packets ride conntrack: no second report.
    assert.equal((await h.run(FROM, tcpFrame({ srcMac: POD_A.podMac, dstMac: POD_A.lxcMac, src: POD_A.ip, dst: POD_B.ip, sport: 40000, dport: 8080, flags: TcpFlag.ACK }))).retval, TcAction.REDIRECT);
    assertEvents(await h.takeEvents(), []);
  });

  it('reports the staged view\'s deny entry with its cookie', async () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: true, cookie: COOKIE.ALLOW_ALL });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: true, staged: true, cookie: COOKIE.ALLOW_ALL });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: true, proto: IpProto.TCP, port: 22, cookie: COOKIE.STAGED_DENY, deny: true, staged: true });
    h.addEndpoint({ ...POD_A, flags: EndpointFlag.STAGED });
    assert.equal((await h.run(FROM, synAtoB(22))).retval, TcAction.REDIRECT);
    assertEvents(await h.takeEvents(), [
      { subtype: PolicyVerdict.ALLOWED, cookie: COOKIE.ALLOW_ALL },
      { subtype: PolicyVerdict.WOULD_DROP, direction: EGRESS, cookie: COOKIE.STAGED_DENY, dport: 22 },
    ]);
  });

  it('reports WOULD_ALLOW for a flow the enforced policy drops and the staged view allows; the drop stays', async () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: true, proto: IpProto.TCP, port: 80, cookie: COOKIE.STAGED_80, staged: true });
    h.addEndpoint({ ...POD_A, flags: EndpointFlag.STAGED });
    assert.equal((await h.run(FROM, synAtoB(80))).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(), [
      { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: EGRESS, cookie: ReservedCookie.NONE },
      { type: POLICY_VERDICT, subtype: PolicyVerdict.WOULD_ALLOW, direction: EGRESS, cookie: COOKIE.STAGED_80 },
      { type: DROP, subtype: code('POLICY'), direction: EGRESS },
    ]);
    assert.equal(ct(h, 80), undefined);
  });

  it('looks the staged view up only for an endpoint flagged STAGED', async () => {
    enforcedAllowAllStaged80();
    assert.equal((await h.run(FROM, synAtoB(8080))).retval, TcAction.REDIRECT);
    assertEvents(await h.takeEvents(), [{ subtype: PolicyVerdict.ALLOWED, cookie: COOKIE.ALLOW_ALL }]);
  });

  it('judges the destination\'s ingress staged view too (node to pod, the ingress stage)', async () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: ReservedCookie.ALLOW_LOCALHOST });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: false, proto: IpProto.TCP, port: 443, cookie: COOKIE.STAGED_80, staged: true });
    h.addEndpoint({ ...POD_A, flags: EndpointFlag.STAGED });
    assert.equal((await h.run(TO, tcpFrame({ src: NODE_IP, dst: POD_A.ip, sport: 30000, dport: 8080 }))).retval, TcAction.OK);
    assertEvents(await h.takeEvents(), [
      { subtype: PolicyVerdict.ALLOWED, direction: INGRESS, cookie: ReservedCookie.ALLOW_LOCALHOST },
      { subtype: PolicyVerdict.WOULD_DROP, direction: INGRESS, cookie: ReservedCookie.NONE, srcIdentity: IDENTITY.HOST, dstEndpoint: POD_A.endpointId },
    ]);
  });
});

describe('staged views through the writers', () => {
  let h: ProgramHarness;
  beforeEach(async () => (h = await openHarness(true)));
  afterEach(async () => h?.close());

  const origin = { policy: 'TendrilNetworkPolicy/prod/a-80', rule: 0, path: 'spec.egress[0]' };
  const allowAll: MapEntry[] = [
    { key: { direction: 'egress', identity: 0, proto: 0, port: 0, prefixLen: 0 }, verdict: 'allow', derivedFrom: [], builtin: 'not-enforced' },
    { key: { direction: 'ingress', identity: 0, proto: 0, port: 0, prefixLen: 0 }, verdict: 'allow', derivedFrom: [], builtin: 'not-enforced' },
  ];
  const only80: MapEntry[] = [
    { key: { direction: 'egress', identity: IDENTITY.B, proto: IpProto.TCP, port: 80, prefixLen: 16 }, verdict: 'allow', derivedFrom: [origin] },
    allowAll[1]!,
  ];

  it('a sync writes the staged view under staged keys beside the enforced entries, the flag goes on the endpoint, and a sync without it removes both', async () => {
    const policy = await PolicyMapWriter.open(h.policy);
    const endpoints = await EndpointMap.open(h.endpoints);
    const a = { id: POD_A.endpointId, identity: POD_A.identity, ifindex: POD_A.ifindex, lxcMac: POD_A.lxcMac, podMac: POD_A.podMac, addresses: [{ family: 4 as const, ip: POD_A.ip, gateway: '10.200.0.1' }] };
    policy.sync(POD_A.endpointId, allowAll, only80);
    endpoints.sync({ ...a, staged: true });
    assert.equal(policy.entriesOf(POD_A.endpointId).filter((e) => e.key.staged === true).length, 2);
    assert.equal((h.endpoints.get(parseIp(POD_A.ip))!.flags & EndpointFlag.STAGED) !== 0, true);

    assert.equal((await h.run(FROM, synAtoB(8080))).retval, TcAction.REDIRECT);
    assertEvents(await h.takeEvents(), [{ subtype: PolicyVerdict.WOULD_DROP, direction: EGRESS, cookie: ReservedCookie.NONE, dport: 8080 }]);
    assert.equal((await h.run(FROM, synAtoB(80))).retval, TcAction.REDIRECT);
    assertEvents(await h.takeEvents(), []);

    // Promoted: the staged view is the enforced state now, and nothing is staged.
    endpoints.sync(a);
    policy.sync(POD_A.endpointId, only80);
    assert.equal(policy.entriesOf(POD_A.endpointId).filter((e) => e.key.staged === true).length, 0);
    assert.equal(h.endpoints.get(parseIp(POD_A.ip))!.flags & EndpointFlag.STAGED, 0);
    assert.equal((await h.run(FROM, synAtoB(8080, 40001))).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(), [{ subtype: PolicyVerdict.NO_MATCH }, { type: DROP, subtype: code('POLICY') }]);
    assert.equal((await h.run(FROM, synAtoB(80, 40001))).retval, TcAction.REDIRECT);
    assertEvents(await h.takeEvents(), [{ subtype: PolicyVerdict.ALLOWED, cookie: ruleCookie(origin) }]);

    // A writer opened on the map (an agent restart) reads the staged keys back as staged.
    policy.sync(POD_A.endpointId, allowAll, only80);
    const reopened = await PolicyMapWriter.open(h.policy);
    assert.deepEqual(reopened.sync(POD_A.endpointId, allowAll, only80), { upserts: 0, deletes: 0 });
  });
});

describe('bpf_lxc policy audit mode', () => {
  let h: ProgramHarness;
  beforeEach(async () => (h = await openHarness(false)));
  afterEach(async () => h?.close());

  it('passes a flow the policy refuses, reports AUDIT in each refusing direction, and creates its conntrack entry', async () => {
    h.setConfig(TraceLevel.OFF, ConfigFlag.POLICY_AUDIT);
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: true, proto: IpProto.TCP, port: 80, cookie: COOKIE.STAGED_DENY, deny: true });
    assert.equal((await h.run(FROM, synAtoB(80))).retval, TcAction.REDIRECT);
    assertEvents(await h.takeEvents(), [
      { type: POLICY_VERDICT, subtype: PolicyVerdict.AUDIT, direction: EGRESS, cookie: COOKIE.STAGED_DENY },
      { type: POLICY_VERDICT, subtype: PolicyVerdict.AUDIT, direction: INGRESS, cookie: ReservedCookie.NONE },
    ]);
    assert.ok(ct(h, 80));
    assert.equal(h.metric(code('POLICY_DENY'), EGRESS).packets, 0n);
    assert.equal(h.metric(code('POLICY'), INGRESS).packets, 0n);
  });

  it('keeps every other drop: a spoofed source is still dropped', async () => {
    h.setConfig(TraceLevel.OFF, ConfigFlag.POLICY_AUDIT);
    const spoofed = tcpFrame({ srcMac: POD_A.podMac, dstMac: POD_A.lxcMac, src: '10.200.0.99', dst: POD_B.ip, sport: 1, dport: 80, flags: TcpFlag.SYN });
    assert.equal((await h.run(FROM, spoofed)).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(), [{ type: DROP, subtype: code('INVALID_SOURCE') }]);
  });

  it('drops again once audit mode is off', async () => {
    h.setConfig(TraceLevel.OFF, 0);
    assert.equal((await h.run(FROM, synAtoB(80))).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(), [{ subtype: PolicyVerdict.NO_MATCH }, { type: DROP, subtype: code('POLICY') }]);
  });
});
