// `tendril status` as `cilium status`: where the bpffs comes from (a private
// one under `ip netns exec` warned about at start and in the status, with
// the fix), the programs as the kernel has them, map pressure, drops in the
// last minute, services, policies and masquerade — from real agent processes.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { Health } from '../../src/api/types.js';
import { confListFromBytes } from '../../src/libcni/index.js';
import { dbFromWebPolicy } from '../../src/policy/testing/policies.js';
import { AgentProcess, ping, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { run } from '../support/run.js';
import { serviceSpec } from '../support/serviceApi.js';
import { TENDRIL_BIN } from '../support/tendrilBin.js';

requireRoot('the agent status test');

const pool = new NetnsPool('st');
// startSingleNode names its node namespace `node`: a second single node needs a pool of its own.
const runtimePool = new NetnsPool('sr');
after(async () => {
  await pool.cleanup();
  await runtimePool.cleanup();
});

async function status(agent: AgentProcess): Promise<{ text: string; json: Health }> {
  const text = await run([TENDRIL_BIN, 'status', '--socket', agent.socket]);
  const json = await run([TENDRIL_BIN, 'status', '--socket', agent.socket, '-o', 'json']);
  assert.equal(json.code, 0, json.stderr);
  return { text: text.stdout, json: JSON.parse(json.stdout) as Health };
}

test('an agent under `ip netns exec` pins into a private bpffs: a warning at start and in status, with the fix', async () => {
  const node = (await pool.add('pnode')).name;
  const agent = await AgentProcess.create({ nodeNetns: node, nodeName: 'tdl-node-st1', args: ['--pod-cidr', '10.253.1.0/24'], launcher: 'ip-netns-exec' });
  try {
    await agent.start();
    assert.match(agent.output, /PRIVATE BPFFS: .*nsenter --net=\/run\/netns\/NAME/, 'the start-up warning names the fix');
    const { text, json } = await status(agent);
    assert.equal(json.datapath?.bpffs?.sharing, 'private');
    assert.equal(json.datapath?.bpffs?.ownMountNamespace, true);
    assert.match(json.datapath?.bpffs?.fix ?? '', /nsenter --net=/);
    assert.match(text, /BPF filesystem\s+\/sys\/fs\/bpf\/tdl-agent-\S+ \(PRIVATE to the agent's mount namespace: programs and maps are lost when the agent stops\)\. Fix: .*nsenter --net=/);
  } finally {
    await agent.cleanup();
  }
});

test('an agent in the node\'s mount namespace (nsenter --net) has the node\'s bpffs and says nothing of it', async () => {
  const node = (await pool.add('hnode')).name;
  const agent = await AgentProcess.create({ nodeNetns: node, nodeName: 'tdl-node-st2', args: ['--pod-cidr', '10.253.2.0/24'] });
  try {
    await agent.start();
    assert.doesNotMatch(agent.output, /PRIVATE BPFFS/);
    const { text, json } = await status(agent);
    assert.equal(json.datapath?.bpffs?.sharing, 'node');
    assert.equal(json.datapath?.bpffs?.ownMountNamespace, false);
    assert.equal(json.datapath?.bpffs?.fix, undefined);
    assert.match(text, /BPF filesystem\s+\/sys\/fs\/bpf\/tdl-agent-\S+ \(the node's\)\n/);
  } finally {
    await agent.cleanup();
  }
});

test('an agent in a mount namespace of its own that has the node\'s bpffs (a container with /sys/fs/bpf mounted) does not warn', async () => {
  const node = (await pool.add('cnode')).name;
  const agent = await AgentProcess.create({ nodeNetns: node, nodeName: 'tdl-node-st5', args: ['--pod-cidr', '10.253.5.0/24'], launcher: 'unshare-mount' });
  try {
    await agent.start();
    assert.doesNotMatch(agent.output, /PRIVATE BPFFS/);
    const { json } = await status(agent);
    assert.equal(json.datapath?.bpffs?.ownMountNamespace, true, 'its own mount namespace is seen');
    assert.equal(json.datapath?.bpffs?.sharing, 'node', 'but the bpffs is the node\'s');
  } finally {
    await agent.cleanup();
  }
});

test('status shows programs, map pressure, drops, services, policies and masquerade with real numbers', async () => {
  const s = await startSingleNode(pool, { nodeName: 'tdl-node-st3', args: ['--pod-cidr', '10.253.3.0/24'] });
  try {
    // A node device: an uplink with a global address, which the datapath detects (its peer has no address: not a device).
    for (const argv of [
      ['ip', 'link', 'add', 'tdlup0', 'type', 'veth', 'peer', 'name', 'tdlup1'],
      ['ip', 'addr', 'add', '192.0.2.10/24', 'dev', 'tdlup0'],
      ['ip', 'link', 'set', 'tdlup1', 'up'],
      ['ip', 'link', 'set', 'tdlup0', 'up'],
    ]) {
      const r = await pool.exec(s.node, argv);
      assert.equal(r.code, 0, r.stderr);
    }
    // Devices are detected at start: restart so the agent takes the uplink.
    await s.agent.stop();
    await s.agent.start();
    const list = confListFromBytes(JSON.stringify({ cniVersion: '1.0.0', name: 'tdlstatus', plugins: [{ type: 'tendril-cni', socket: s.agent.socket }] }));
    const addPod = async (name: string, labels: string) => {
      const ns = await pool.add(name);
      await s.runtime.addNetworkList(list, { containerId: `tdl-${name}`, netns: ns.path, ifName: 'eth0', args: [['K8S_POD_NAMESPACE', 'prod'], ['K8S_POD_NAME', name], ['TENDRIL_LABELS', labels]] });
      const ep = await s.agent.client.getEndpoint(`container-id:tdl-${name}`);
      return { ns: ns.name, ep };
    };
    const web = await addPod('web', 'app=web');
    const db = await addPod('db', 'app=db');
    const dbIp = db.ep.addresses[0]!.ip;

    const before = await status(s.agent);
    assert.equal(before.json.services?.count, 0);
    assert.deepEqual(before.json.policies, { count: 0, endpointsEnforced: 0 });
    assert.equal(await ping(pool, web.ns, dbIp), true, 'no policy yet: the ping passes');

    const imported = await run([TENDRIL_BIN, 'policy', 'import', '-', '--socket', s.agent.socket], { input: dbFromWebPolicy({ namespace: 'prod', tcpPort: 5432 }) });
    assert.equal(imported.code, 0, imported.stderr);
    await s.agent.client.request('PUT', '/service/7', serviceSpec({ frontend: { ip: '10.96.7.7', port: 80 }, backends: [{ ip: dbIp, port: 5432 }, { ip: web.ep.addresses[0]!.ip, port: 5432 }] }));
    // Denied: the policy lets web reach db on TCP 5432 only.
    assert.equal(await ping(pool, web.ns, dbIp), false, 'the policy denies ICMP to db');

    const { text, json } = await status(s.agent);
    const dp = json.datapath!;
    assert.equal(dp.kind, 'bpf');
    assert.deepEqual(dp.programs?.endpoints, { expected: 2, attached: 2, missing: [] });
    assert.deepEqual(
      dp.programs?.devices.map((d) => [d.name, d.role, d.missing.length]),
      [['tdlup0', 'node', 0], ['lo', 'loopback', 0], ['tendril_host', 'host', 0]],
    );
    assert.ok((dp.maps?.length ?? 0) > 0 && dp.maps!.every((m) => m.maxEntries > 0), 'the fullest maps, with their sizes');
    assert.ok(dp.maps!.some((m) => m.entries > 0));
    assert.ok((dp.drops?.total ?? 0) >= 1, `the denied ping is counted: ${JSON.stringify(dp.drops)}`);
    assert.match(dp.drops!.topReasons[0]!.reason, /POLICY/);
    assert.deepEqual(json.services, { count: 1, backends: 2 });
    assert.deepEqual(json.policies, { count: 1, endpointsEnforced: 1 });
    assert.equal(json.masquerade?.enabled, true);
    assert.equal(json.masquerade?.by, 'bpf');
    assert.deepEqual(json.masquerade?.devices, ['tdlup0']);
    assert.deepEqual(json.masquerade?.cidrs, ['10.253.3.0/24']);
    assert.ok((json.masquerade?.natPortRanges.length ?? 0) > 0);

    assert.match(text, /Programs\s+3 devices \(tdlup0, lo, tendril_host\); 2\/2 endpoints\n/);
    assert.match(text, /Map pressure\s+tendril_\w+ \d+\.\d% \(\d+\/\d+\)/);
    assert.match(text, /Drops \(last \d+s\)\s+[1-9]\d* \(\w*POLICY\w* \d+/);
    assert.match(text, /Services\s+1 \(2 backends\)/);
    assert.match(text, /Policies\s+1 in force, 1 endpoint with policy enforced/);
    assert.match(text, /Masquerade\s+on \(bpf\), for 10\.253\.3\.0\/24, on tdlup0, NAT ports \d+-\d+/);

    // A program taken off behind the agent's back shows as missing.
    const hostIf = db.ep.hostIfName;
    const del = await pool.exec(s.node, ['tc', 'filter', 'del', 'dev', hostIf, 'ingress']);
    assert.equal(del.code, 0, del.stderr);
    const broken = await status(s.agent);
    assert.deepEqual(broken.json.datapath?.programs?.endpoints, { expected: 2, attached: 1, missing: [hostIf] });
    assert.match(broken.text, new RegExp(`1/2 endpoints \\(MISSING on ${hostIf}\\)`));
  } finally {
    await s.cleanup();
  }
});

test('a pod namespace mounted by a runtime under `ip netns exec` is refused with what is wrong and the fix', async () => {
  const s = await startSingleNode(runtimePool, { nodeName: 'tdl-node-st4', args: ['--pod-cidr', '10.253.4.0/24'] });
  const podNs = `${runtimePool.prefix}rt`;
  try {
    // As podman under `ip netns exec`: the runtime's `ip netns add` mounts the namespace in its private
    // mount namespace, so the node's (and the agent's) /run/netns holds an empty file by that name.
    const added = await run(['ip', 'netns', 'exec', s.node, 'ip', 'netns', 'add', podNs]);
    assert.equal(added.code, 0, added.stderr);
    const list = confListFromBytes(JSON.stringify({ cniVersion: '1.0.0', name: 'tdlstatus', plugins: [{ type: 'tendril-cni', socket: s.agent.socket }] }));
    const add = s.runtime.addNetworkList(list, { containerId: 'tdl-rt', netns: `/run/netns/${podNs}`, ifName: 'eth0' });
    await assert.rejects(add, (err: Error) => {
      assert.match(err.message, new RegExp(`/run/netns/${podNs} is not a network namespace in the agent's view: it is an empty file`));
      assert.match(err.message, /`ip netns exec`.*`nsenter --net=\/run\/netns\/NAME`/);
      return true;
    });
  } finally {
    // The namespace went with the private mount namespace; its empty mount-point file stays on the node.
    await run(['ip', 'netns', 'del', podNs]);
    await s.cleanup();
  }
});
