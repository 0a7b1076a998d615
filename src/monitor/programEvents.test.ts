// The whole chain from a real program to `tendril monitor`'s event: the
// datapath object (build/bpf/bpf_lxc.o) loaded with its maps pinned in a
// bpffs directory of the test's own, a packet through BPF_PROG_TEST_RUN, the
// record read from the pinned ring buffer by MonitorHub, resolved with the
// rule its cookie stands for; and the same pins read by DatapathInspector.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { pino } from 'pino';
import { requireRoot } from '../../test/support/root.js';
import { DropReason, MapName, ReservedCookie, TraceLevel } from '../datapath/bpf/constants.js';
import { DatapathInspector } from '../datapath/bpf/inspect.js';
import { datapathConfig, endpointInfo, endpointKey, ipcacheKey, ipcacheValue, policyEntry, policyKey, NO_NAT_CONFIG } from '../datapath/bpf/layout.js';
import { ruleCookie } from '../datapath/bpf/ruleCookie.js';
import { POD_A, POD_B } from '../datapath/bpf/testing/fixtures.js';
import { TcpFlag, tcpFrame } from '../datapath/bpf/testing/packets.js';
import { LXC_OBJECT } from '../datapath/bpf/testing/programHarness.js';
import { BPFFS_ROOT, BpfMap, BpfObject, codec, ensureBpffs, removePinDir, TcAction } from '../datapath/kernel/bpf/index.js';
import { parseIp, parsePrefix } from '../netip/index.js';
import { parsePolicyText } from '../policy/index.js';
import { agentMonitorContext, InterfaceNames, type MonitorEvent, MonitorHub, pinnedRingBuffer } from './index.js';

requireRoot('the monitor end-to-end test');

const POLICIES = parsePolicyText(`
apiVersion: tendril.io/v1
kind: TendrilNetworkPolicy
metadata: { name: b-deny, namespace: shop }
spec:
  endpointSelector: { matchLabels: { app: b } }
  ingressDeny:
    - fromEndpoints: [{ matchLabels: { app: a } }]
      toPorts: [{ ports: [{ port: "80", protocol: TCP }] }]
---
apiVersion: tendril.io/v1
kind: TendrilNetworkPolicy
metadata: { name: a-egress, namespace: shop }
spec:
  endpointSelector: { matchLabels: { app: a } }
  egress:
    - toEndpoints: [{ matchLabels: { app: b } }]
`);
const DENY_ORIGIN = { policy: 'TendrilNetworkPolicy/shop/b-deny', rule: 0, path: 'spec.ingressDeny[0]' };
const ALLOW_ORIGIN = { policy: 'TendrilNetworkPolicy/shop/a-egress', rule: 0, path: 'spec.egress[0]' };
const LABELS: Record<number, string[]> = { [POD_A.identity]: ['k8s:app=a'], [POD_B.identity]: ['k8s:app=b'] };

const root = join(BPFFS_ROOT, `tdl-${randomBytes(4).toString('hex')}`);
const pinDir = join(root, 'tendril');
let object: BpfObject | undefined;

before(async () => {
  await ensureBpffs();
  object = await BpfObject.load(LXC_OBJECT, {
    pinRoot: pinDir,
    maxEntries: { [MapName.IPCACHE]: 64, [MapName.POLICY]: 64, [MapName.CT_TCP]: 64, [MapName.CT_ANY]: 64, [MapName.FRAG]: 64, [MapName.ENDPOINTS]: 64, [MapName.METRICS]: 64, [MapName.EVENTS]: 1 << 16 },
  });
});

after(async () => {
  object?.close();
  await removePinDir(root);
});

/** Writes through the pins, as an agent of another process would. */
function pinned<K, V>(name: string, key: codec.Codec<K>, value: codec.Codec<V>): BpfMap<K, V> {
  return BpfMap.openPinned(join(pinDir, name), key, value);
}

test('a packet denied by a deny rule: verdicts and drop reach the monitor resolved, with the rule named', async () => {
  const maps = [
    pinned(MapName.ENDPOINTS, endpointKey, endpointInfo),
    pinned(MapName.IPCACHE, ipcacheKey, ipcacheValue),
    pinned(MapName.POLICY, policyKey, policyEntry),
    pinned(MapName.CONFIG, codec.u32, datapathConfig),
  ] as const;
  const [endpoints, ipcache, policy, config] = maps;
  // The real listing of this namespace's links, over netlink, as the agent does.
  const interfaces = new InterfaceNames();
  await interfaces.refresh();
  const hub = new MonitorHub({
    source: pinnedRingBuffer(join(pinDir, MapName.EVENTS)),
    context: agentMonitorContext({ identityLabels: (id) => LABELS[id], policies: () => POLICIES, policyRevision: () => 1, interfaces }),
    log: pino({ level: 'silent' }),
  });
  const events: MonitorEvent[] = [];
  const sub = await hub.subscribe({ endpoint: POD_A.endpointId }, (e) => events.push(e));
  try {
    config.set(0, { traceLevel: TraceLevel.NEW_FLOWS, flags: 0, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: 0, nodeIpv4: 0, ...NO_NAT_CONFIG });
    for (const ep of [POD_A, POD_B]) {
      endpoints.set(parseIp(ep.ip), { ifindex: ep.ifindex, identity: ep.identity, endpointId: ep.endpointId, flags: 0, lxcMac: ep.lxcMac, podMac: ep.podMac });
      ipcache.set(parsePrefix(`${ep.ip}/32`), { identity: ep.identity, tunnelIp4: 0, flags: 0 });
    }
    policy.set({ endpointId: POD_A.endpointId, identity: POD_B.identity, egress: true, proto: 0, port: 0, portPrefixLen: 0 }, { cookie: ruleCookie(ALLOW_ORIGIN), deny: 0, l4PrefixBits: 0 });
    // B's egress is not enforced: its entry carries the reserved cookie (and no verdict is emitted for it).
    policy.set({ endpointId: POD_B.endpointId, identity: 0, egress: true, proto: 0, port: 0, portPrefixLen: 0 }, { cookie: ReservedCookie.NOT_ENFORCED, deny: 0, l4PrefixBits: 0 });
    policy.set({ endpointId: POD_B.endpointId, identity: POD_A.identity, egress: false, proto: 6, port: 80, portPrefixLen: 16 }, { cookie: ruleCookie(DENY_ORIGIN), deny: 1, l4PrefixBits: 24 });

    const syn = tcpFrame({ srcMac: POD_A.podMac, dstMac: POD_A.lxcMac, src: POD_A.ip, dst: POD_B.ip, sport: 40100, dport: 80, flags: TcpFlag.SYN });
    assert.equal((await object!.program('tendril_from_container').testRun({ data: syn })).retval, TcAction.SHOT);

    const deadline = Date.now() + 5000;
    while (!events.some((e) => e.type === 'drop') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    const byType = (t: string) => events.filter((e) => e.type === t);
    const drop = byType('drop')[0];
    assert.ok(drop, `a drop event (got ${JSON.stringify(events)})`);
    assert.deepEqual(drop.drop, { reason: 'POLICY_DENY', code: Math.abs(DropReason.POLICY_DENY.code), text: DropReason.POLICY_DENY.text });
    assert.equal(drop.direction, 'ingress');
    assert.deepEqual(drop.source, { endpoint: POD_A.endpointId, identity: POD_A.identity, labels: ['k8s:app=a'], ip: POD_A.ip, port: 40100 });
    assert.deepEqual(drop.destination, { endpoint: POD_B.endpointId, identity: POD_B.identity, labels: ['k8s:app=b'], ip: POD_B.ip, port: 80 });
    assert.deepEqual(drop.tcpFlags, ['SYN']);
    assert.equal(drop.interface.name, 'lo');
    assert.deepEqual(drop.rule, { cookie: ruleCookie(DENY_ORIGIN), text: 'TendrilNetworkPolicy/shop/b-deny spec.ingressDeny[0]', origins: [DENY_ORIGIN] });
    const verdicts = byType('policy-verdict').map((e) => `${e.direction} ${e.verdict} ${e.rule?.text} dst-ep ${e.destination.endpoint}`);
    assert.deepEqual(verdicts, ['egress allowed TendrilNetworkPolicy/shop/a-egress spec.egress[0] dst-ep 22', 'ingress denied TendrilNetworkPolicy/shop/b-deny spec.ingressDeny[0] dst-ep 22']);
    assert.ok(Math.abs(Date.parse(drop.time) - Date.now()) < 5000, drop.time);

    // The same datapath read from its pins alone.
    const inspector = new DatapathInspector(pinDir);
    const metrics = await inspector.metrics();
    assert.ok(metrics.some((m) => m.reasonName === 'POLICY_DENY' && m.direction === 'ingress' && m.packets === 1), JSON.stringify(metrics));
    assert.deepEqual((await inspector.policy(POD_B.endpointId)).map((r) => [r.direction, r.identity, r.portFirst, r.deny, r.cookie]), [
      ['egress', 0, 0, false, ReservedCookie.NOT_ENFORCED],
      ['ingress', POD_A.identity, 80, true, ruleCookie(DENY_ORIGIN)],
    ]);
    assert.deepEqual(await inspector.conntrack(), [], 'a denied flow leaves no conntrack entry');
  } finally {
    await sub.close();
    await hub.close();
    for (const m of maps) m.close();
  }
  assert.equal(hub.stats().reading, false);
});
