/**
 * Conntrack at its limits, through BPF_PROG_TEST_RUN on bpf_lxc.o: a full
 * table refuses a new flow with CT_FULL and evicts none of the flows it
 * holds; an endpoint over --bpf-ct-endpoint-max gets CT_ENDPOINT_BUDGET
 * while other endpoints' new flows still open; a closed tuple reused is not
 * charged twice.
 */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { codec, TcAction } from '../kernel/bpf/index.js';
import { CtFlag, DropReason, MapName, TrafficDirection } from './constants.js';
import { ctBudget, NO_NAT_CONFIG } from './layout.js';
import { IDENTITY, installNode, POD_A, POD_B, POD_C } from './testing/fixtures.js';
import { IpProto, TcpFlag, tcpFrame } from './testing/packets.js';
import { LXC_OBJECT, ProgramHarness } from './testing/programHarness.js';

requireRoot('the conntrack limit program tests');

const FROM = 'tendril_from_container';
const { EGRESS } = TrafficDirection;
const code = (r: keyof typeof DropReason): number => -DropReason[r].code;

describe('conntrack at its limits (bpf_lxc)', () => {
  let h: ProgramHarness;

  async function load(sizes: Record<string, number> = {}, ctEndpointMax = 0): Promise<void> {
    h = await ProgramHarness.load(LXC_OBJECT, sizes);
    installNode(h);
    h.config.set(0, { traceLevel: 0, flags: 0, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: 0, nodeIpv4: 0, ...NO_NAT_CONFIG, ctEndpointMax });
    // A and B may both open TCP/80 to C.
    for (const [from, id] of [[POD_A, IDENTITY.A], [POD_B, IDENTITY.B]] as const) {
      h.addPolicy({ endpointId: from.endpointId, identity: IDENTITY.C, egress: true, proto: IpProto.TCP, port: 80, cookie: 0x1001 });
      h.addPolicy({ endpointId: POD_C.endpointId, identity: id, egress: false, proto: IpProto.TCP, port: 80, cookie: 0x2002 });
    }
  }
  afterEach(async () => {
    await h?.close();
  });

  const frame = (from: typeof POD_A, sport: number, flags: number = TcpFlag.SYN) =>
    tcpFrame({ srcMac: from.podMac, dstMac: from.lxcMac, src: from.ip, dst: POD_C.ip, sport, dport: 80, flags });
  const budget = () => h.object.map(MapName.CT_BUDGET, codec.u32, ctBudget);

  it('a full table refuses the new flow (CT_FULL, counted); every flow it holds still passes', async () => {
    await load({ [MapName.CT_TCP]: 4 });
    for (let i = 0; i < 4; i++) assert.equal((await h.run(FROM, frame(POD_A, 40000 + i))).retval, TcAction.REDIRECT);
    const refused = await h.run(FROM, frame(POD_A, 40100));
    assert.equal(refused.retval, TcAction.SHOT);
    assert.equal(h.metric(code('CT_FULL'), EGRESS).packets, 1n);
    assert.equal(await h.ctCount(), 4);
    for (let i = 0; i < 4; i++) {
      assert.equal((await h.run(FROM, frame(POD_A, 40000 + i, TcpFlag.ACK))).retval, TcAction.REDIRECT, `flow ${i} still passes`);
      assert.ok(h.ct({ saddr: POD_A.ip, daddr: POD_C.ip, sport: 40000 + i, dport: 80, proto: IpProto.TCP }), `flow ${i} kept its entry`);
    }
  });

  it('an endpoint over its budget gets CT_ENDPOINT_BUDGET; another endpoint\'s new flows still open', async () => {
    await load({}, 3);
    for (let i = 0; i < 3; i++) assert.equal((await h.run(FROM, frame(POD_A, 40000 + i))).retval, TcAction.REDIRECT);
    assert.equal(budget().get(POD_A.endpointId)?.entries, 3);
    assert.equal((await h.run(FROM, frame(POD_A, 40003))).retval, TcAction.SHOT);
    assert.equal(h.metric(code('CT_ENDPOINT_BUDGET'), EGRESS).packets, 1n);
    assert.equal(budget().get(POD_A.endpointId)?.entries, 3, 'a refused flow is not counted');
    // A's established flows go on; B opens its own.
    assert.equal((await h.run(FROM, frame(POD_A, 40001, TcpFlag.ACK))).retval, TcAction.REDIRECT);
    for (let i = 0; i < 3; i++) assert.equal((await h.run(FROM, frame(POD_B, 50000 + i))).retval, TcAction.REDIRECT);
    assert.equal(budget().get(POD_B.endpointId)?.entries, 3);
    const entry = h.ct({ saddr: POD_A.ip, daddr: POD_C.ip, sport: 40000, dport: 80, proto: IpProto.TCP });
    assert.ok(entry && (entry.flags & CtFlag.CHARGED) !== 0, 'the entry says it is charged');
  });

  it('a closed tuple reused by a new SYN replaces its entry without a second charge', async () => {
    await load({}, 2);
    assert.equal((await h.run(FROM, frame(POD_A, 40000))).retval, TcAction.REDIRECT);
    assert.equal((await h.run(FROM, frame(POD_A, 40000, TcpFlag.RST))).retval, TcAction.REDIRECT);
    assert.equal((await h.run(FROM, frame(POD_A, 40000))).retval, TcAction.REDIRECT);
    assert.equal(budget().get(POD_A.endpointId)?.entries, 1);
    assert.equal((await h.run(FROM, frame(POD_A, 40001))).retval, TcAction.REDIRECT);
    assert.equal(budget().get(POD_A.endpointId)?.entries, 2);
  });

  it('without a budget nothing is charged', async () => {
    await load();
    assert.equal((await h.run(FROM, frame(POD_A, 40000))).retval, TcAction.REDIRECT);
    assert.equal(budget().get(POD_A.endpointId), undefined);
    const entry = h.ct({ saddr: POD_A.ip, daddr: POD_C.ip, sport: 40000, dport: 80, proto: IpProto.TCP });
    assert.equal((entry!.flags & CtFlag.CHARGED), 0);
  });
});
