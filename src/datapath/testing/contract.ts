import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type Datapath, type EndpointDatapathState, isDatapathError, type DatapathErrorKind, type PodAddress, type PodNetworkSpec } from '../types.js';

/**
 * The one behaviour suite every Datapath implementation must pass (hono's
 * runTest pattern): the fake (no root) and the Linux datapath (root, inside a
 * node namespace) call it with a factory; the eBPF datapath will too. The
 * endpoint and agent logic is unit-tested over the fake, so whatever that
 * logic relies on — errors by kind, idempotent teardown, veth ends dying
 * together, namespaces told apart — is asserted here for both.
 */
export interface DatapathSubject {
  readonly datapath: Datapath;
  /** The IPv4 router address the suite gives setupNode; every pod's gateway. */
  readonly routerAddress: string;
  /** A path naming the node's own network namespace. */
  readonly nodeNetnsPath: string;
  /** A fresh pod network namespace; returns its path. */
  newNetns(): Promise<string>;
  removeNetns(path: string): Promise<void>;
  /** A path to something that is not a network namespace (a FIFO on Linux). */
  newNonNetnsFile(): Promise<string>;
  /** A veth pair made by someone else, host end on the node. */
  createVethPair(hostIfName: string, netns: string, podIfName: string): Promise<void>;
  /** `ip link del` behind the datapath's back. */
  deleteLink(name: string, netns?: string): Promise<void>;
  /** `ip route del` of a node route behind the datapath's back. */
  deleteHostRoute(prefix: string): Promise<void>;
  /** The device of the node's route to `prefix`, if there is one. */
  hostRouteDev(prefix: string): Promise<string | undefined>;
  linkExists(name: string, netns?: string): Promise<boolean>;
  cleanup(): Promise<void>;
}

export type NewDatapathSubject = () => Promise<DatapathSubject>;

async function rejectsWithKind(p: Promise<unknown>, ...kinds: DatapathErrorKind[]): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(isDatapathError(err), `expected a DatapathError, got ${String(err)}`);
    if (kinds.length > 0) assert.ok(kinds.includes(err.kind), `expected kind ${kinds.join('|')}, got ${err.kind}: ${err.message}`);
    return true;
  });
}

async function eventually(what: string, cond: () => Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export function runDatapathContract(name: string, newSubject: NewDatapathSubject): void {
  describe(`datapath contract: ${name}`, { timeout: 120_000 }, () => {
    let s: DatapathSubject;
    let dp: Datapath;
    let seq = 0;
    const POD_NET = '10.213.0.';
    const addresses = (n: number): PodAddress[] => [{ family: 4, ip: `${POD_NET}${n}`, gateway: s.routerAddress }];
    const podSpec = async (n: number, overrides: Partial<PodNetworkSpec> = {}): Promise<PodNetworkSpec> => ({
      containerId: `tdl-contract-${name}-${n}-${seq++}`,
      netns: overrides.netns ?? (await s.newNetns()),
      ifName: 'eth0',
      mtu: 1400,
      addresses: addresses(n),
      ...overrides,
    });
    const syncState = (id: number, hostIfName: string, hostIfIndex: number, addrs: PodAddress[]): EndpointDatapathState => ({
      id,
      identity: 256,
      hostIfName,
      hostIfIndex,
      hostMac: '',
      podMac: '',
      addresses: addrs,
      policy: { revision: 1, entries: [] },
    });

    before(async () => {
      s = await newSubject();
      dp = s.datapath;
      await dp.setupNode({ routerAddresses: [{ family: 4, ip: s.routerAddress }], masqueradeCidrs: [`${POD_NET}0/24`] });
    });
    after(async () => {
      await s?.cleanup();
    });

    it('setupNode is idempotent', async () => {
      await dp.setupNode({ routerAddresses: [{ family: 4, ip: s.routerAddress }], masqueradeCidrs: [`${POD_NET}0/24`] });
    });

    it('classifyNetns tells pod namespaces from the node\'s, from missing paths and from files that are no namespace', async () => {
      const pod = await s.newNetns();
      assert.equal(await dp.classifyNetns(pod), 'pod');
      assert.equal(await dp.classifyNetns(s.nodeNetnsPath), 'node');
      assert.equal(await dp.classifyNetns(await s.newNonNetnsFile()), 'not-netns');
      assert.equal(await dp.classifyNetns('/var/run/netns/tdl-contract-never-made'), 'missing');
      await s.removeNetns(pod);
      assert.equal(await dp.classifyNetns(pod), 'missing');
    });

    it('addPod plumbs a veth pair the checks accept, with a host route over the lxc end', async () => {
      const spec = await podSpec(10);
      const net = await dp.addPod(spec);
      assert.match(net.hostIfName, /^lxc[0-9a-f]{12}$/);
      assert.ok(net.hostIfIndex > 0 && net.podIfIndex > 0);
      assert.match(net.hostMac, /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/);
      assert.match(net.podMac, /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/);
      assert.equal(await dp.podExists(spec.containerId, spec.ifName), true);
      assert.ok((await dp.listPodHostInterfaces()).includes(net.hostIfName));
      assert.equal(await s.hostRouteDev(`${POD_NET}10/32`), net.hostIfName);
      assert.equal(await s.linkExists('eth0', spec.netns), true);
      await dp.checkPod(spec);
      await dp.removePod({ ...spec, hostIfName: net.hostIfName });
    });

    it('the host interface name depends on container and interface only', async () => {
      const spec = await podSpec(11);
      const a = await dp.addPod(spec);
      await dp.removePod(spec);
      const b = await dp.addPod(spec);
      assert.equal(a.hostIfName, b.hostIfName);
      const second = await dp.addPod({ ...spec, ifName: 'net1', addresses: addresses(12) });
      assert.notEqual(second.hostIfName, b.hostIfName);
      await dp.removePod({ ...spec, ifName: 'net1' });
      await dp.removePod(spec);
    });

    it('addPod replaces interfaces an interrupted ADD left in the way', async () => {
      const spec = await podSpec(13);
      await dp.addPod(spec);
      const again = await dp.addPod(spec);
      assert.equal((await dp.listPodHostInterfaces()).filter((n) => n === again.hostIfName).length, 1);
      await dp.checkPod(spec);
      await dp.removePod(spec);
    });

    it('addPod replaces this attachment\'s own host end whose peer is elsewhere (an interrupted ADD into an older namespace)', async () => {
      const spec = await podSpec(23);
      const old = await s.newNetns();
      const hostIf = dp.podHostIfName(spec.containerId, spec.ifName);
      await s.createVethPair(hostIf, old, 'eth0');
      const net = await dp.addPod(spec);
      assert.equal(net.hostIfName, hostIf);
      assert.equal(await s.linkExists('eth0', old), false, 'the old pair went');
      await dp.checkPod(spec);
      await dp.removePod(spec);
    });

    it('addPod refuses an interface of the pod\'s name that is another attachment\'s, and changes nothing', async () => {
      const first = await podSpec(24);
      const firstNet = await dp.addPod(first);
      const second = await podSpec(25, { netns: first.netns });
      const before = await dp.listPodHostInterfaces();
      await rejectsWithKind(dp.addPod(second), 'exists');
      assert.deepEqual(await dp.listPodHostInterfaces(), before, 'no host end of the second attachment');
      assert.equal(await s.hostRouteDev(`${POD_NET}24/32`), firstNet.hostIfName);
      assert.equal(await s.hostRouteDev(`${POD_NET}25/32`), undefined);
      await dp.checkPod(first);
      // Its teardown, with the same namespace and name, leaves the first attachment alone.
      await dp.removePod(second);
      await dp.checkPod(first);
      await dp.removePod(first);
    });

    it('addPod refuses an interface of the pod\'s name that is no attachment\'s, also with its own leftover host end present', async () => {
      const spec = await podSpec(26);
      const foreign = `tdlfg${seq++}`;
      await s.createVethPair(foreign, spec.netns, 'eth0');
      await rejectsWithKind(dp.addPod(spec), 'exists');
      assert.equal(await s.linkExists('eth0', spec.netns), true);
      assert.equal(await s.linkExists(foreign), true);
      // This attachment's host name left over with its peer in another namespace: the pod's eth0 is still not its peer.
      const hostIf = dp.podHostIfName(spec.containerId, spec.ifName);
      await s.createVethPair(hostIf, await s.newNetns(), 'eth0');
      await rejectsWithKind(dp.addPod(spec), 'exists');
      assert.equal(await s.linkExists('eth0', spec.netns), true);
      assert.equal(await s.linkExists(foreign), true);
      assert.equal(await s.linkExists(hostIf), true, 'nothing changed');
      await dp.removePod(spec);
      assert.equal(await s.linkExists(hostIf), false, 'the leftover host end is the attachment\'s own');
      assert.equal(await s.linkExists('eth0', spec.netns), true, 'removePod never deletes by name in the pod');
      await s.deleteLink(foreign);
    });

    it('preflightPod answers what addPod would refuse, changing nothing', async () => {
      const first = await podSpec(27);
      await dp.addPod(first);
      // Free, and this attachment's own pair (a re-ADD into the same namespace): fine.
      await dp.preflightPod({ containerId: 'tdl-contract-preflight', netns: await s.newNetns(), ifName: 'eth0' });
      await dp.preflightPod(first);
      // Another attachment's interface, and a missing namespace: refused.
      await rejectsWithKind(dp.preflightPod({ containerId: 'tdl-contract-other', netns: first.netns, ifName: first.ifName }), 'exists');
      await rejectsWithKind(dp.preflightPod({ containerId: first.containerId, netns: '/var/run/netns/tdl-contract-gone', ifName: 'eth0' }), 'netns-gone');
      await dp.checkPod(first);
      await dp.removePod(first);
    });

    it('addPod into a namespace that does not exist fails with netns-gone and leaves nothing', async () => {
      const before = await dp.listPodHostInterfaces();
      await rejectsWithKind(dp.addPod(await podSpec(14, { netns: '/var/run/netns/tdl-contract-gone' })), 'netns-gone');
      assert.deepEqual(await dp.listPodHostInterfaces(), before);
    });

    it('addPod that fails half-way removes what it created', async () => {
      const spec = await podSpec(15, { addresses: [{ family: 4, ip: `${POD_NET}15`, gateway: '10.213.9.9' }] });
      const before = await dp.listPodHostInterfaces();
      await rejectsWithKind(dp.addPod(spec));
      assert.deepEqual(await dp.listPodHostInterfaces(), before, 'no host interface left');
      assert.equal(await s.linkExists('eth0', spec.netns), false, 'no pod interface left');
    });

    it('removePod is idempotent, also once the namespace is gone or not given', async () => {
      const spec = await podSpec(16);
      const net = await dp.addPod(spec);
      await dp.removePod(spec);
      assert.equal(await dp.podExists(spec.containerId, spec.ifName), false);
      assert.equal(await s.linkExists(net.hostIfName), false);
      assert.equal(await s.linkExists('eth0', spec.netns), false, 'the pod end went with the host end');
      assert.equal(await s.hostRouteDev(`${POD_NET}16/32`), undefined, 'the host route went with the interface');
      await dp.removePod(spec);
      await dp.removePod({ ...spec, netns: '' });
      await s.removeNetns(spec.netns);
      await dp.removePod(spec);
    });

    it('removePod without the namespace removes the pod end with the host end', async () => {
      const spec = await podSpec(22);
      await dp.addPod(spec);
      await dp.removePod({ ...spec, netns: '' });
      assert.equal(await s.linkExists('eth0', spec.netns), false);
      assert.equal(await dp.podExists(spec.containerId, spec.ifName), false);
    });

    it('a pod whose namespace is destroyed loses its host end too', async () => {
      const spec = await podSpec(17);
      await dp.addPod(spec);
      await s.removeNetns(spec.netns);
      // The kernel destroys a namespace's devices in a work queue, shortly after its last reference goes.
      await eventually('the host end to go with the namespace', async () => !(await dp.podExists(spec.containerId, spec.ifName)));
      await dp.removePod(spec);
    });

    it('checkPod names what is missing', async () => {
      const spec = await podSpec(18);
      const net = await dp.addPod(spec);
      await s.deleteHostRoute(`${POD_NET}18/32`);
      await rejectsWithKind(dp.checkPod(spec), 'not-found');
      await s.deleteLink('eth0', spec.netns);
      await rejectsWithKind(dp.checkPod(spec), 'not-found');
      assert.equal(await dp.podExists(spec.containerId, spec.ifName), false, 'the host end went with the pod end');
      await rejectsWithKind(dp.checkPod({ ...spec, netns: '/var/run/netns/tdl-contract-gone' }), 'not-found');
      await dp.removePod({ ...spec, hostIfName: net.hostIfName });
    });

    it('syncEndpoint puts a host route removed behind its back back in force, and is idempotent', async () => {
      const spec = await podSpec(19);
      const net = await dp.addPod(spec);
      const state = syncState(19, net.hostIfName, net.hostIfIndex, spec.addresses);
      await dp.syncEndpoint(state);
      await s.deleteHostRoute(`${POD_NET}19/32`);
      await rejectsWithKind(dp.checkPod(spec), 'not-found');
      await dp.syncEndpoint(state);
      assert.equal(await s.hostRouteDev(`${POD_NET}19/32`), net.hostIfName);
      await dp.checkPod(spec);
      await dp.syncEndpoint(state);
      await dp.removePod(spec);
      await rejectsWithKind(dp.syncEndpoint(state), 'not-found');
    });

    it('adoptPod takes over a veth pair made by someone else; releaseAdoptedPod leaves the interface', async () => {
      const netns = await s.newNetns();
      const hostIf = `tdlad${seq++}`;
      await rejectsWithKind(dp.adoptPod({ hostIfName: hostIf, netns, ifName: 'eth0', addresses: addresses(20) }), 'not-found');
      await s.createVethPair(hostIf, netns, 'eth0');
      const r = await dp.adoptPod({ hostIfName: hostIf, netns, ifName: 'eth0', addresses: addresses(20) });
      assert.ok(r.hostIfIndex > 0);
      assert.equal(await s.hostRouteDev(`${POD_NET}20/32`), hostIf);
      assert.equal(await dp.podExists('whatever', 'eth0', hostIf), true);
      await dp.syncEndpoint(syncState(20, hostIf, r.hostIfIndex, addresses(20)));
      await dp.releaseAdoptedPod({ hostIfName: hostIf, addresses: addresses(20) });
      assert.equal(await s.hostRouteDev(`${POD_NET}20/32`), undefined);
      assert.equal(await s.linkExists(hostIf), true, 'the interface is not tendril\'s to delete');
      await dp.releaseAdoptedPod({ hostIfName: hostIf, addresses: addresses(20) });
      await dp.removePod({ containerId: 'whatever', hostIfName: hostIf, netns, ifName: 'eth0', addresses: addresses(20) });
      assert.equal(await s.linkExists(hostIf), false);
    });

    it('adoptPod refuses, changing nothing, any interface that is not a veth into the given pod namespace under the given name', async () => {
      const netns = await s.newNetns();
      const other = await s.newNetns();
      const mine = `tdlad${seq++}`;
      const theirs = `tdlad${seq++}`;
      await s.createVethPair(mine, netns, 'eth1');
      await s.createVethPair(theirs, other, 'eth0');
      const cases: Array<[string, string, string]> = [
        // A device that is no veth (the node's loopback stands for its uplink), the host device's in-node pair, another pod's veth, a name that is not the pod side's.
        ['lo', netns, 'eth0'],
        ['tendril_host', netns, 'eth0'],
        [theirs, netns, 'eth0'],
        [mine, netns, 'eth0'],
        [mine, s.nodeNetnsPath, 'eth1'],
      ];
      for (const [hostIfName, ns, ifName] of cases) {
        await rejectsWithKind(dp.adoptPod({ hostIfName, netns: ns, ifName, addresses: addresses(22) }), 'refused');
        assert.equal(await s.hostRouteDev(`${POD_NET}22/32`), undefined, `${hostIfName}: no route was added`);
        assert.equal(await s.linkExists(hostIfName), true, `${hostIfName} is still there`);
      }
      await dp.adoptPod({ hostIfName: mine, netns, ifName: 'eth1', addresses: addresses(22) });
      assert.equal(await s.hostRouteDev(`${POD_NET}22/32`), mine);
      await dp.releaseAdoptedPod({ hostIfName: mine, addresses: addresses(22) });
      await dp.removePod({ containerId: 'whatever', hostIfName: mine, netns, ifName: 'eth1', addresses: [] });
      await dp.removePod({ containerId: 'whatever', hostIfName: theirs, netns: other, ifName: 'eth0', addresses: [] });
    });

    it('removeHostInterface deletes orphaned pod interfaces only', async () => {
      await rejectsWithKind(dp.removeHostInterface('tendril_host'), 'failed');
      await rejectsWithKind(dp.removeHostInterface('eth0'), 'failed');
      assert.equal(await s.linkExists('tendril_host'), true);
      const spec = await podSpec(21);
      const net = await dp.addPod(spec);
      await dp.removeHostInterface(net.hostIfName);
      assert.ok(!(await dp.listPodHostInterfaces()).includes(net.hostIfName));
      assert.equal(await s.linkExists('eth0', spec.netns), false);
      await dp.removeHostInterface(net.hostIfName);
    });

    it('verifyAttachment owns only the attachment\'s derived veth whose peer is its interface in its namespace', async () => {
      const spec = await podSpec(23);
      const net = await dp.addPod(spec);
      const other = await s.newNetns();
      const rec = { containerId: spec.containerId, ifName: spec.ifName, netns: spec.netns, hostIfName: net.hostIfName };
      assert.deepEqual(await dp.verifyAttachment(rec), { kind: 'owned', hostIfIndex: net.hostIfIndex, hostMac: net.hostMac });
      const foreign: Array<[string, Parameters<Datapath['verifyAttachment']>[0], RegExp]> = [
        // The uplink (loopback stands for it), the host device's in-node pair, the node's namespace, another namespace, another interface name.
        ['the uplink', { ...rec, hostIfName: 'lo' }, /not lxc/],
        ['tendril_host, even adopted', { ...rec, hostIfName: 'tendril_host', adopted: true }, /not a veth|node's own namespace/],
        ['the node\'s namespace', { ...rec, netns: s.nodeNetnsPath }, /node's own namespace/],
        ['another namespace', { ...rec, netns: other }, /not in/],
        ['another interface name', { ...rec, ifName: 'eth1' }, /not lxc|derived/],
        ['another interface name, adopted', { ...rec, ifName: 'eth1', adopted: true }, /is eth0, not eth1/],
      ];
      for (const [what, r, reason] of foreign) {
        const got = await dp.verifyAttachment(r);
        assert.equal(got.kind, 'foreign', `${what}: ${JSON.stringify(got)}`);
        if (got.kind === 'foreign') assert.match(got.reason, reason, what);
      }
      assert.equal((await dp.verifyAttachment({ ...rec, adopted: true })).kind, 'owned');
      await dp.removePod(spec);
      assert.deepEqual(await dp.verifyAttachment(rec), { kind: 'gone' });
      await s.removeNetns(other);
    });

    it('podExists is false for a pod never added', async () => {
      assert.equal(await dp.podExists('tdl-contract-never', 'eth0'), false);
    });
  });
}
