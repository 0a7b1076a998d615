// The datapath contract and the eBPF datapath's own behaviour, against real
// netns, veths, tcx links and pinned maps. Not a *.test file: it programs the
// namespace it runs in, so bpfDatapath.test.ts runs it in a throw-away node
// namespace; its pins live under a temp bpffs root removed at the end.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { IPCache } from '../../ipcache/index.js';
import { createLogger } from '../../logging/logger.js';
import { formatPrefix, parseIp, parsePrefix } from '../../netip/index.js';
import type { MapEntry } from '../../policy/index.js';
import { BpfMap, codec, removePinDir, TcxLink } from '../kernel/bpf/index.js';
import { run, runOk } from '../../testing/run.js';
import { getSysctl, interfaceSysctl } from '../linux/sysctl.js';
import { runDatapathContract } from '../testing/contract.js';
import { linuxSubject } from '../testing/linuxSubject.js';
import { type EndpointDatapathState, isDatapathError, type PodNetwork, type PodNetworkSpec } from '../types.js';
import { BpfDatapath } from './bpfDatapath.js';
import { DeviceFlag, MapName, ReservedCookie, TraceLevel } from './constants.js';
import { ct4Key, ctEntry, datapathConfig, deviceInfo, endpointInfo, endpointKey, ipcacheKey, ipcacheValue, ipmasqKey, lb4Key, lb4Service, policyEntry, policyKey, type PolicyKey } from './layout.js';
import { SERVICE_ROUTE_NEXTHOP } from './serviceRoutes.js';
import type { MapSizes } from './objects.js';
import { ruleCookie } from './ruleCookie.js';

const log = createLogger('bpf-datapath-test', 'warn');
/** Small maps: the defaults preallocate hundreds of MiB of conntrack. */
const SIZES: MapSizes = {
  [MapName.ENDPOINTS]: 256,
  [MapName.IPCACHE]: 256,
  [MapName.POLICY]: 1024,
  [MapName.CT_TCP]: 1024,
  [MapName.CT_ANY]: 1024,
  [MapName.FRAG]: 64,
  [MapName.EVENTS]: 1 << 16,
};
const roots: string[] = [];
async function tempRoot(): Promise<string> {
  const root = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
  roots.push(root);
  return root;
}
after(async () => {
  for (const r of roots) await removePinDir(r);
});

for (const lxcAttach of ['tcx', 'clsact'] as const) {
  runDatapathContract(lxcAttach === 'tcx' ? 'bpf' : 'bpf (clsact on pods)', async () => {
    const base = await linuxSubject();
    const bpffsRoot = await tempRoot();
    const datapath = await BpfDatapath.open({ bpffsRoot, log, mapSizes: SIZES, lxcAttach });
    return {
      ...base,
      datapath,
      cleanup: async () => {
        await datapath.close();
        await base.cleanup();
      },
    };
  });
}

const origin = (i: number) => ({ policy: 'tendril/default/p', rule: 0, path: `spec.ingress[${i}]` });
const allowTcp = (identity: number, port: number, prefixLen = 16, i = 0): MapEntry => ({
  key: { direction: 'ingress', identity, proto: 6, port, prefixLen },
  verdict: 'allow',
  derivedFrom: [origin(i)],
});
const allowAllEgress: MapEntry = { key: { direction: 'egress', identity: 0, proto: 0, port: 0, prefixLen: 0 }, verdict: 'allow', derivedFrom: [], builtin: 'not-enforced' };

describe('BpfDatapath', { timeout: 120_000 }, () => {
  let root: string;
  let pinDir: string;
  let dp: BpfDatapath;
  let subject: Awaited<ReturnType<typeof linuxSubject>>;
  let n = 0;
  const ROUTER = '10.214.0.1';
  const maps = () => ({
    lxc: BpfMap.openPinned(join(pinDir, MapName.ENDPOINTS), endpointKey, endpointInfo),
    policy: BpfMap.openPinned(join(pinDir, MapName.POLICY), policyKey, policyEntry),
  });
  async function policyOf(id: number): Promise<Map<string, { key: PolicyKey; cookie: number; deny: number; l4PrefixBits: number }>> {
    const { policy, lxc } = maps();
    lxc.close();
    const out = new Map<string, { key: PolicyKey; cookie: number; deny: number; l4PrefixBits: number }>();
    try {
      for await (const [k, v] of policy.entries()) if (k.endpointId === id) out.set(`${k.egress ? 'e' : 'i'}/${k.identity}/${k.proto}/${k.port}/${k.portPrefixLen}`, { key: k, ...v });
    } finally {
      policy.close();
    }
    return out;
  }
  async function newPod(datapath: BpfDatapath = dp): Promise<{ spec: PodNetworkSpec; net: PodNetwork; ip: string }> {
    const i = 10 + n++;
    const ip = `10.214.0.${i}`;
    const spec: PodNetworkSpec = { containerId: `tdl-bpfdp-${i}`, netns: await subject.newNetns(), ifName: 'eth0', mtu: 1500, addresses: [{ family: 4, ip, gateway: ROUTER }] };
    return { spec, net: await datapath.addPod(spec), ip };
  }
  const state = (id: number, p: { spec: PodNetworkSpec; net: PodNetwork }, entries: MapEntry[], identity = 1000): EndpointDatapathState => ({
    id,
    identity,
    hostIfName: p.net.hostIfName,
    hostIfIndex: p.net.hostIfIndex,
    hostMac: p.net.hostMac,
    podMac: p.net.podMac,
    addresses: p.spec.addresses,
    policy: { revision: 1, entries },
  });

  before(async () => {
    subject = await linuxSubject();
    root = await tempRoot();
    pinDir = join(root, 'tendril');
    dp = await BpfDatapath.open({ bpffsRoot: root, log, mapSizes: SIZES, fallbackRouteCidrs: ['10.214.0.0/24'], lxcAttach: 'tcx' });
    await dp.setupNode({ routerAddresses: [{ family: 4, ip: ROUTER }], masqueradeCidrs: [] });
  });
  after(async () => {
    await dp?.close();
    await subject?.cleanup();
  });

  it('setupNode attaches the host programs, writes the trace level and routes the pod CIDR to tendril_host behind the /32s', async () => {
    for (const d of ['ingress', 'egress']) {
      const link = TcxLink.openPinned(join(pinDir, 'links', `tendril_host-${d}`));
      assert.ok(link.info().ifindex > 0);
      link.close();
    }
    const config = BpfMap.openPinned(join(pinDir, MapName.CONFIG), codec.u32, datapathConfig);
    const c = config.get(0)!;
    config.close();
    assert.equal(c.traceLevel, TraceLevel.NEW_FLOWS);
    assert.ok(c.hostIfindex > 0);
    assert.equal(await subject.hostRouteDev('10.214.0.0/24'), 'tendril_host');
  });

  it('addPod attaches both lxc programs (in force when syncEndpoint returns); syncEndpoint writes the endpoint entry and the policy entries with cookies and l4 prefix bits', async () => {
    const p = await newPod();
    await dp.syncEndpoint(state(41, p, [allowTcp(300, 80), allowTcp(0, 8080, 13, 1), allowAllEgress]));
    // addPod starts the attachment; syncEndpoint (the ADD's first regeneration) returns once it is in force.
    for (const d of ['ingress', 'egress'] as const) {
      const link = TcxLink.openPinned(join(pinDir, 'links', `${p.net.hostIfName}-${d}`));
      const info = link.info();
      link.close();
      assert.equal(info.ifindex, p.net.hostIfIndex);
      assert.equal(info.direction, d);
    }
    const { lxc, policy } = maps();
    policy.close();
    const e = lxc.get(parseIp(p.ip))!;
    lxc.close();
    assert.deepEqual(e, { ifindex: p.net.hostIfIndex, identity: 1000, endpointId: 41, flags: 0, lxcMac: p.net.hostMac, podMac: p.net.podMac });
    const entries = await policyOf(41);
    assert.equal(entries.size, 3);
    assert.deepEqual(entries.get('i/300/6/80/16'), { key: { endpointId: 41, identity: 300, egress: false, proto: 6, port: 80, portPrefixLen: 16 }, cookie: ruleCookie(origin(0)), deny: 0, l4PrefixBits: 24 });
    assert.equal(entries.get('i/0/6/8080/13')!.l4PrefixBits, 21);
    assert.deepEqual(entries.get('e/0/0/0/0'), { key: { endpointId: 41, identity: 0, egress: true, proto: 0, port: 0, portPrefixLen: 0 }, cookie: ReservedCookie.NOT_ENFORCED, deny: 0, l4PrefixBits: 0 });
    await dp.removePod({ ...p.spec, hostIfName: p.net.hostIfName });
  });

  it('a regeneration writes only the keys that changed', async () => {
    const p = await newPod();
    await dp.syncEndpoint(state(42, p, [allowTcp(300, 80), allowTcp(301, 81), allowAllEgress]));
    // A value changed behind the datapath's back on a key the next diff leaves alone stays as it is: the key is not rewritten.
    const { policy, lxc } = maps();
    lxc.close();
    const untouched: PolicyKey = { endpointId: 42, identity: 301, egress: false, proto: 6, port: 81, portPrefixLen: 16 };
    policy.set(untouched, { cookie: 12345, deny: 0, l4PrefixBits: 24 });
    policy.close();
    await dp.syncEndpoint(state(42, p, [{ ...allowTcp(300, 80), verdict: 'deny' }, allowTcp(301, 81), allowTcp(302, 82)]));
    const entries = await policyOf(42);
    assert.deepEqual([...entries.keys()].sort(), ['i/300/6/80/16', 'i/301/6/81/16', 'i/302/6/82/16']);
    assert.equal(entries.get('i/301/6/81/16')!.cookie, 12345);
    assert.equal(entries.get('i/300/6/80/16')!.deny, 1);
    await dp.removePod({ ...p.spec, hostIfName: p.net.hostIfName });
  });

  it('a policy map too small for a regeneration: a DatapathError, and the map holds exactly what it held before', async () => {
    const small = await BpfDatapath.open({ bpffsRoot: await tempRoot(), log, mapSizes: { ...SIZES, [MapName.POLICY]: 4 } });
    try {
      const p = await newPod(small);
      const before = [allowTcp(300, 80), allowTcp(301, 81), allowTcp(302, 82)];
      await small.syncEndpoint(state(43, p, before));
      const snapshot = small.policy.entriesOf(43);
      await assert.rejects(small.syncEndpoint(state(43, p, [{ ...allowTcp(300, 80), verdict: 'deny' }, allowTcp(301, 81), allowTcp(302, 82), allowTcp(303, 83), allowTcp(304, 84)])), (err: unknown) => {
        assert.ok(isDatapathError(err, 'failed'));
        assert.match(err.message, /policy map tendril_policy is full/);
        assert.match(err.message, /holds what it held before/);
        return true;
      });
      const inMap: Array<[PolicyKey, unknown]> = [];
      for await (const [k, v] of small.policy.map.entries()) inMap.push([k, v]);
      assert.equal(inMap.length, 3);
      assert.deepEqual(small.policy.entriesOf(43), snapshot);
      for (const [k, v] of inMap) assert.deepEqual(v, snapshot.find((s) => s.key.port === k.port)!.value);
      await small.removePod({ ...p.spec, hostIfName: p.net.hostIfName });
    } finally {
      await small.close();
    }
  });

  it('a restart reuses maps and shadows, replaces the programs through the pinned links and keeps conntrack', async () => {
    const p = await newPod();
    await dp.syncEndpoint(state(44, p, [allowTcp(300, 80), allowAllEgress]));
    const ct = BpfMap.openPinned(join(pinDir, MapName.CT_TCP), ct4Key, ctEntry);
    const flow = { saddr: parseIp(p.ip), daddr: parseIp('10.214.0.200'), sport: 40000, dport: 80, proto: 6, flags: 0 };
    ct.set(flow, { expiresNs: 1n << 60n, packets: 1n, bytes: 60n, srcIdentity: 1000, dstIdentity: 2, srcEndpoint: 44, dstEndpoint: 0, revNatIndex: 0, tcpFlags: 2, flags: 0, backendId: 0, natAddr: parseIp('0.0.0.0'), natPort: 0 });
    const linkPath = join(pinDir, 'links', `${p.net.hostIfName}-ingress`);
    const link = TcxLink.openPinned(linkPath);
    const before = link.info();
    link.close();

    const second = await BpfDatapath.open({ bpffsRoot: root, log, mapSizes: SIZES, lxcAttach: 'tcx' });
    try {
      const sorted = (es: Array<{ key: PolicyKey }>) => es.map((e) => JSON.stringify(e)).sort();
      assert.deepEqual(sorted(second.policy.entriesOf(44)), sorted(dp.policy.entriesOf(44)));
      assert.ok(second.endpoints.endpointIds().includes(44));
      assert.ok(ct.get(flow), 'conntrack entry survives the second load');
      // The restored endpoint's regeneration re-attaches: same link, new program.
      await second.syncEndpoint(state(44, p, [allowTcp(300, 80), allowAllEgress]));
      const again = TcxLink.openPinned(linkPath);
      const after = again.info();
      again.close();
      assert.equal(after.id, before.id, 'the pinned link is updated, not replaced by another');
      assert.notEqual(after.progId, before.progId);
      assert.equal(after.progId, second['objects'].fromContainer.id);
      // Endpoints the agent did not restore and whose device is gone lose their entries; live ones keep theirs.
      const gone = await newPod(second);
      await second.syncEndpoint(state(45, gone, [allowAllEgress]));
      await subject.deleteLink(gone.net.hostIfName);
      const third = await BpfDatapath.open({ bpffsRoot: root, log, mapSizes: SIZES, lxcAttach: 'tcx' });
      await third.restoreDone([{ id: 44, hostIfName: p.net.hostIfName }]);
      assert.deepEqual(third.policy.entriesOf(45), []);
      assert.ok(!third.endpoints.endpointIds().includes(45));
      assert.equal(existsSync(join(pinDir, 'links', `${gone.net.hostIfName}-ingress`)), false);
      assert.equal(third.policy.entriesOf(44).length, 2);
      await third.removePod({ ...p.spec, hostIfName: p.net.hostIfName });
      await third.close();
      assert.equal((await policyOf(44)).size, 0);
    } finally {
      ct.close();
      await second.close();
    }
  });

  it('removePod deletes the endpoint entries, its policy entries and its link pins', async () => {
    const p = await newPod();
    await dp.syncEndpoint(state(46, p, [allowTcp(300, 80)]));
    await dp.removePod({ ...p.spec, hostIfName: p.net.hostIfName });
    const { lxc, policy } = maps();
    policy.close();
    assert.equal(lxc.get(parseIp(p.ip)), undefined);
    lxc.close();
    assert.equal((await policyOf(46)).size, 0);
    assert.equal(existsSync(join(pinDir, 'links', `${p.net.hostIfName}-ingress`)), false);
    assert.equal(existsSync(join(pinDir, 'links', `${p.net.hostIfName}-egress`)), false);
  });

  it('adoptPod attaches the programs; releaseAdoptedPod takes them off the interface it leaves in place', async () => {
    const netns = await subject.newNetns();
    const hostIf = `tdlad${randomBytes(2).toString('hex')}`;
    await subject.createVethPair(hostIf, netns, 'eth0');
    const addresses = [{ family: 4 as const, ip: '10.214.0.99', gateway: ROUTER }];
    const r = await dp.adoptPod({ hostIfName: hostIf, netns, ifName: 'eth0', addresses });
    await dp.syncEndpoint({ id: 47, identity: 1000, hostIfName: hostIf, hostIfIndex: r.hostIfIndex, hostMac: r.hostMac, podMac: '', addresses, policy: { revision: 1, entries: [allowAllEgress] } });
    const link = TcxLink.openPinned(join(pinDir, 'links', `${hostIf}-egress`));
    assert.equal(link.info().ifindex, r.hostIfIndex);
    // The record has no pod MAC; delivery needs it: learnt from the pod's interface at adoption.
    const podLink = JSON.parse(await runOk(['nsenter', `--net=${netns}`, '--', 'ip', '-j', 'link', 'show', 'dev', 'eth0'])) as Array<{ address: string }>;
    const { lxc, policy } = maps();
    policy.close();
    assert.equal(lxc.get(parseIp('10.214.0.99'))?.podMac, podLink[0]!.address);
    lxc.close();
    await dp.releaseAdoptedPod({ hostIfName: hostIf, addresses });
    assert.equal(link.info().ifindex, 0, 'the link was detached from the device that stays');
    link.close();
    assert.equal(await subject.linkExists(hostIf), true);
    assert.equal((await policyOf(47)).size, 0);
    await subject.deleteLink(hostIf);
  });

  it('with clsact attachment: filters on both hooks, replaced in place by a second instance, taken off an adopted device', async () => {
    const clsRoot = await tempRoot();
    const a = await BpfDatapath.open({ bpffsRoot: clsRoot, log, mapSizes: SIZES, lxcAttach: 'clsact' });
    const b = await BpfDatapath.open({ bpffsRoot: clsRoot, log, mapSizes: SIZES, lxcAttach: 'clsact' });
    try {
      const netns = await subject.newNetns();
      const hostIf = `tdlcl${randomBytes(2).toString('hex')}`;
      await subject.createVethPair(hostIf, netns, 'eth0');
      const addresses = [{ family: 4 as const, ip: '10.214.0.98', gateway: ROUTER }];
      const r = await a.adoptPod({ hostIfName: hostIf, netns, ifName: 'eth0', addresses });
      const filters = async () => {
        const { Netlink } = await import('../kernel/netlink/index.js');
        const nl = await Netlink.open();
        try {
          return { ingress: await nl.listBpfFilters(hostIf, 'ingress'), egress: await nl.listBpfFilters(hostIf, 'egress') };
        } finally {
          await nl.close();
        }
      };
      const first = await filters();
      assert.equal(first.ingress.length, 1);
      assert.equal(first.egress.length, 1);
      assert.equal(existsSync(join(clsRoot, 'tendril', 'links', `${hostIf}-ingress`)), false, 'no pins for clsact');
      await b.syncEndpoint({ id: 48, identity: 1000, hostIfName: hostIf, hostIfIndex: r.hostIfIndex, hostMac: r.hostMac, podMac: '', addresses, policy: { revision: 1, entries: [allowAllEgress] } });
      const second = await filters();
      assert.equal(second.ingress.length, 1, 'replaced, not added');
      assert.equal(second.egress.length, 1);
      await b.releaseAdoptedPod({ hostIfName: hostIf, addresses });
      const third = await filters();
      assert.equal(third.ingress.length + third.egress.length, 0);
      await subject.deleteLink(hostIf);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('mirrors the IPCache into tendril_ipcache (replay, upsert, delete) and prunes what a previous run left', async () => {
    const ipcMap = BpfMap.openPinned(join(pinDir, MapName.IPCACHE), ipcacheKey, ipcacheValue);
    try {
      const stale = parsePrefix('10.99.0.0/16');
      ipcMap.set(stale, { identity: 77, tunnelIp4: 0, flags: 0 });
      const ipcache = new IPCache();
      ipcache.upsert('10.214.0.50/32', { source: 'local', owner: 'endpoint:1', identity: 1001 });
      const mirror = await BpfDatapath.open({ bpffsRoot: root, log, mapSizes: SIZES });
      mirror.attachIpcache(ipcache);
      assert.equal(ipcMap.get(parsePrefix('10.214.0.50/32'))?.identity, 1001);
      ipcache.upsert('192.168.7.0/24', { source: 'kvstore', owner: 'node:b', identity: 1002, hostIP: '172.16.0.2' });
      assert.deepEqual(ipcMap.get(parsePrefix('192.168.7.0/24')), { identity: 1002, tunnelIp4: (172 << 24 >>> 0) + (16 << 16) + 2, flags: 0 });
      ipcache.delete('10.214.0.50/32', { source: 'local', owner: 'endpoint:1' });
      assert.equal(ipcMap.get(parsePrefix('10.214.0.50/32')), undefined);
      await mirror.restoreDone([]);
      assert.equal(ipcMap.get(stale), undefined);
      const left: string[] = [];
      for await (const k of ipcMap.keys()) left.push(formatPrefix(k));
      assert.deepEqual(left, ['192.168.7.0/24']);
      await mirror.close();
    } finally {
      ipcMap.close();
    }
  });
  it('setupNode programs the node devices (netdev programs, tendril_devices), lo egress, tendril_ipmasq4, and removes an old nftables masquerade table', async () => {
    const outside = await subject.newNetns();
    const dev = `tdlup${randomBytes(2).toString('hex')}`;
    await subject.createVethPair(dev, outside, 'eth0');
    await runOk(['ip', 'addr', 'add', '192.0.2.10/24', 'dev', dev]);
    // Its IPv6 SNAT address (--ipv6-masquerade): a global one, usable at once; a tentative one would not be taken.
    await runOk(['ip', 'addr', 'add', '2001:db8:77::10/64', 'dev', dev, 'nodad']);
    await runOk(['ip', 'link', 'set', dev, 'up']);
    // What the routing datapath (or an earlier build) left.
    await runOk(['nft', 'add', 'table', 'inet', 'tendril']);
    await dp.setupNode({ routerAddresses: [{ family: 4, ip: ROUTER }], masqueradeCidrs: ['10.214.0.0/16', 'fd00:214::/64'] });
    const objects = dp['objects'];
    const linkInfo = (name: string) => {
      const l = TcxLink.openPinned(join(pinDir, 'links', name));
      try {
        return l.info();
      } finally {
        l.close();
      }
    };
    // /sys is the root namespace's here (nsenter keeps it): ask ip.
    const [link] = JSON.parse(await runOk(['ip', '-j', 'link', 'show', 'dev', dev])) as Array<{ ifindex: number; address: string }>;
    const ifindex = link!.ifindex;
    assert.equal(linkInfo(`${dev}-ingress`).progId, objects.fromNetdev.id);
    assert.equal(linkInfo(`${dev}-egress`).progId, objects.toNetdev.id);
    assert.equal(linkInfo(`${dev}-egress`).ifindex, ifindex);
    assert.equal(linkInfo('lo-egress').progId, objects.toLo.id);
    assert.equal(existsSync(join(pinDir, 'links', 'lo-ingress')), false, 'lo has no ingress program');
    const devices = BpfMap.openPinned(join(pinDir, MapName.DEVICES), codec.u32, deviceInfo);
    assert.deepEqual(devices.get(ifindex), { ipv4: parseIp('192.0.2.10'), flags: DeviceFlag.MASQUERADE, mac: link!.address, ipv6: parseIp('2001:db8:77::10') });
    const ipmasq = BpfMap.openPinned(join(pinDir, MapName.NO_MASQUERADE), ipmasqKey, codec.u8);
    const masq: string[] = [];
    for await (const p of ipmasq.keys()) masq.push(formatPrefix(p));
    ipmasq.close();
    // Both families as given: the agent leaves the IPv6 ones out unless --ipv6-masquerade (nodeMasqueradeCidrs).
    assert.deepEqual(masq.sort(), ['10.214.0.0/16', 'fd00:214::/64']);
    assert.notEqual((await run(['nft', 'list', 'table', 'inet', 'tendril'])).code, 0, 'no nftables masquerade table with the eBPF datapath');
    // The device loses its global addresses: no longer a device; its entry and programs go.
    await runOk(['ip', 'addr', 'del', '192.0.2.10/24', 'dev', dev]);
    await dp.setupNode({ routerAddresses: [{ family: 4, ip: ROUTER }], masqueradeCidrs: [] });
    // Its IPv6 address alone keeps it a device (an IPv6-only node's), with no IPv4 source.
    assert.deepEqual(devices.get(ifindex), { ipv4: parseIp('0.0.0.0'), flags: DeviceFlag.MASQUERADE, mac: link!.address, ipv6: parseIp('2001:db8:77::10') });
    await runOk(['ip', 'addr', 'del', '2001:db8:77::10/64', 'dev', dev]);
    await dp.setupNode({ routerAddresses: [{ family: 4, ip: ROUTER }], masqueradeCidrs: [] });
    assert.equal(devices.get(ifindex), undefined);
    devices.close();
    assert.equal(existsSync(join(pinDir, 'links', `${dev}-ingress`)), false);
    await subject.deleteLink(dev);
  });

  it('a configured device that does not exist fails setupNode', async () => {
    const strict = await BpfDatapath.open({ bpffsRoot: root, log, mapSizes: SIZES, devices: ['tdlmissing0'] });
    try {
      await assert.rejects(strict.setupNode({ routerAddresses: [{ family: 4, ip: ROUTER }], masqueradeCidrs: [] }), (err: unknown) => isDatapathError(err, 'not-found') && /tdlmissing0/.test((err as Error).message));
    } finally {
      await strict.close();
    }
  });

  it('pods\' lxc devices take replies from a node address: accept_local on, rp_filter off', async () => {
    const p = await newPod();
    await dp.syncEndpoint(state(49, p, [allowAllEgress]));
    assert.equal(await getSysctl(interfaceSysctl(4, p.net.hostIfName, 'accept_local')), '1');
    assert.equal(await getSysctl(interfaceSysctl(4, p.net.hostIfName, 'rp_filter')), '0');
    await dp.removePod({ ...p.spec, hostIfName: p.net.hostIfName });
  });

  it('loadBalancer writes a ClusterIP to the pinned maps and routes it to tendril_host from the router address', async () => {
    await dp.loadBalancer.upsertBackends([{ id: 1, address: '10.214.0.77', port: 8080, protocol: 'TCP', state: 'active' }]);
    await dp.loadBalancer.upsertService({ id: 1, address: '10.96.0.10', port: 80, protocol: 'TCP', type: 'ClusterIP', localTraffic: false, affinityTimeoutSec: 0, backendIds: [1] });
    const svc = BpfMap.openPinned(join(pinDir, MapName.LB_SERVICES), lb4Key, lb4Service);
    assert.equal(svc.get({ address: parseIp('10.96.0.10'), dport: 80, backendSlot: 0, proto: 6, scope: 0 })?.count, 1);
    const routes = JSON.parse(await runOk(['ip', '-j', 'route', 'show', 'exact', '10.96.0.10/32'])) as Array<{ dev: string; gateway: string; prefsrc: string }>;
    assert.deepEqual(routes.map((r) => [r.dev, r.gateway, r.prefsrc]), [['tendril_host', SERVICE_ROUTE_NEXTHOP, ROUTER]]);
    await dp.loadBalancer.deleteService(1);
    await dp.loadBalancer.deleteBackends([1]);
    assert.equal(svc.get({ address: parseIp('10.96.0.10'), dport: 80, backendSlot: 0, proto: 6, scope: 0 }), undefined);
    svc.close();
    assert.equal(await subject.hostRouteDev('10.96.0.10/32'), undefined);
  });
});
