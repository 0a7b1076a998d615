// What renderService makes of internalTrafficPolicy, run through the real
// bpf_lxc program (BPF_PROG_TEST_RUN): a pod's connections to a frontend
// whose internal policy is Local reach only this node's backends, and are
// dropped (NO_SERVICE) when there is none here — no C of its own: the
// entries use the scopes the datapath has.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { requireRoot } from '../../test/support/root.js';
import { DropReason, EventType, LbScope, TrafficDirection } from '../datapath/bpf/constants.js';
import { serviceFlags } from '../datapath/bpf/lbMaps.js';
import { assertEvents, checkedTuple as tuple } from '../datapath/bpf/testing/expect.js';
import { installNode, NODE_IP, POD_A, POD_B, POD_C, REMOTE_POD_IP } from '../datapath/bpf/testing/fixtures.js';
import { LbNode, type TestFrontend } from '../datapath/bpf/testing/lbNode.js';
import { IpProto, TcpFlag, tcpFrame } from '../datapath/bpf/testing/packets.js';
import { LXC_OBJECT, ProgramHarness } from '../datapath/bpf/testing/programHarness.js';
import { TcAction } from '../datapath/kernel/bpf/index.js';
import { renderService } from './render.js';
import type { ServiceFlags } from './types.js';
import { backendKey, validateServiceSpec } from './validate.js';

requireRoot('the internalTrafficPolicy program test');

const FROM = 'tendril_from_container';
const fromA = { srcMac: POD_A.podMac, dstMac: POD_A.lxcMac };
const BE = {
  B: { id: 201, ip: POD_B.ip, port: 8080, proto: IpProto.TCP },
  C: { id: 202, ip: POD_C.ip, port: 8080, proto: IpProto.TCP },
  REMOTE: { id: 203, ip: REMOTE_POD_IP, port: 8080, proto: IpProto.TCP },
};
const SERVICE_ID = 11;

describe('internalTrafficPolicy Local in bpf_lxc', () => {
  let h: ProgramHarness;
  let lb: LbNode;
  /** Each connection its own client port: one pinned before a change would keep its backend. */
  let sport = 42000;

  beforeEach(async () => {
    h = await ProgramHarness.load(LXC_OBJECT);
    lb = new LbNode(h);
    installNode(h);
    for (const b of Object.values(BE)) lb.addBackend(b);
    h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: true, cookie: 0x1001 });
    for (const ep of [POD_B, POD_C]) h.addPolicy({ endpointId: ep.endpointId, identity: 0, egress: false, cookie: 0x1001 });
  });
  afterEach(async () => {
    lb?.close();
    await h?.close();
  });

  /** Renders the service with `local` as this node's backends and writes its entry as LbMaps would. */
  function install(frontend: TestFrontend, flags: ServiceFlags, local: ReadonlySet<string>): void {
    const svc = validateServiceSpec(SERVICE_ID, {
      'frontend-address': { ip: frontend.ip, port: frontend.port, protocol: 'TCP' },
      'backend-addresses': Object.values(BE).map((b) => ({ ip: b.ip, port: b.port })),
      flags,
    });
    const entry = renderService(svc, {
      algorithm: 'random',
      maglevTableSize: 251,
      idOf: (key) => Object.values(BE).find((b) => backendKey(b.ip, b.port, 'TCP') === key)!.id,
      isLocal: (key) => local.has(key.slice(0, key.indexOf(':'))),
    });
    const f = serviceFlags(entry);
    if (entry.internalBackendIds) lb.addService({ id: SERVICE_ID, frontend, backends: entry.internalBackendIds, flags: f, scope: LbScope.INTERNAL });
    lb.addService({ id: SERVICE_ID, frontend, backends: entry.backendIds, flags: f });
  }

  /** Where 20 new connections from pod A go. */
  async function destinations(frontend: TestFrontend, dst: string): Promise<Set<string>> {
    const seen = new Set<string>();
    for (let i = 0; i < 20; i++) {
      const r = await h.run(FROM, tcpFrame({ ...fromA, src: POD_A.ip, dst, sport: sport++, dport: frontend.port, flags: TcpFlag.SYN }));
      // A backend here is redirected to, one elsewhere goes on to the stack.
      assert.notEqual(r.retval, TcAction.SHOT);
      seen.add(tuple(r.data).dst);
    }
    return seen;
  }

  async function refused(frontend: TestFrontend, dst: string): Promise<void> {
    await h.takeEvents();
    const r = await h.run(FROM, tcpFrame({ ...fromA, src: POD_A.ip, dst, sport: sport++, dport: frontend.port, flags: TcpFlag.SYN }));
    assert.equal(r.retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: EventType.DROP, subtype: -DropReason.NO_SERVICE.code, direction: TrafficDirection.EGRESS, saddr: POD_A.ip, dport: frontend.port }]);
  }

  it('a ClusterIP: only this node\'s backends, NO_SERVICE without one', async () => {
    const vip: TestFrontend = { ip: '10.96.0.30', port: 80, proto: IpProto.TCP };
    install(vip, { type: 'ClusterIP' }, new Set([POD_B.ip, POD_C.ip]));
    assert.equal((await destinations(vip, vip.ip)).has(REMOTE_POD_IP), true, 'Cluster: the remote backend too');
    install(vip, { type: 'ClusterIP', internalTrafficPolicy: 'Local' }, new Set([POD_B.ip, POD_C.ip]));
    assert.deepEqual([...(await destinations(vip, vip.ip))].sort(), [POD_B.ip, POD_C.ip].sort());
    install(vip, { type: 'ClusterIP', internalTrafficPolicy: 'Local' }, new Set());
    await refused(vip, vip.ip);
  });

  it('a NodePort reached by a pod: the internal scope has this node\'s backends, or none', async () => {
    const np: TestFrontend = { ip: '0.0.0.0', port: 30090, proto: IpProto.TCP };
    install(np, { type: 'NodePort', internalTrafficPolicy: 'Local' }, new Set([POD_B.ip]));
    assert.deepEqual([...(await destinations(np, NODE_IP))], [POD_B.ip]);
    install(np, { type: 'NodePort', internalTrafficPolicy: 'Local' }, new Set());
    await refused(np, NODE_IP);
    // Both Local: one scope, this node's backends.
    install(np, { type: 'NodePort', trafficPolicy: 'Local', internalTrafficPolicy: 'Local' }, new Set([POD_C.ip]));
    assert.deepEqual([...(await destinations(np, NODE_IP))], [POD_C.ip]);
  });
});
