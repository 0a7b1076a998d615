// `tendril-agent cleanup` on a real node namespace: an eBPF agent with a pod
// and a service, stopped; the dry run lists everything and changes nothing;
// cleanup removes the devices, the pod's host interface, tendril's routes, the
// pins and the state, and leaves what is not tendril's. While an agent runs it
// refuses and changes nothing.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { type CniRuntime, confListFromBytes } from '../../src/libcni/index.js';
import { AGENT_BIN, type AgentProcess, podHostLinks, type SingleNode, startSingleNode } from '../support/agentHarness.js';
import { linkExists, NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { run } from '../support/run.js';

requireRoot('the agent cleanup test');

const pool = new NetnsPool('cl');
const bpffsRoot = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
let node: string;
let agent: AgentProcess;
let runtime: CniRuntime;
let cleanup = async () => {};

/** tendril's routes (rtm_protocol 211 services, 212 nodes) in the node namespace, IPv4 and IPv6, every table. */
async function tendrilRoutes(): Promise<string[]> {
  const out: string[] = [];
  for (const family of ['-4', '-6']) {
    const r = await pool.exec(node, ['ip', '-j', '-N', family, 'route', 'show', 'table', 'all']);
    assert.equal(r.code, 0, r.stderr);
    for (const route of JSON.parse(r.stdout) as Array<{ dst: string; protocol: string | number }>) {
      if ([211, 212].includes(Number(route.protocol))) out.push(`${route.dst} proto ${route.protocol}`);
    }
  }
  return out.sort();
}

function cleanupCli(...args: string[]) {
  return pool.exec(node, [AGENT_BIN, 'cleanup', '--state-dir', agent.stateDir, '--lib-dir', join(agent.stateDir, 'lib'), '--bpffs-root', bpffsRoot, ...args]);
}

before(async () => {
  ({ node, agent, runtime, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-cl', args: ['--pod-cidr', '10.252.0.0/24', '--bpffs-root', bpffsRoot] }));
});
after(async () => {
  await cleanup();
  await pool.cleanup();
  await rm(bpffsRoot, { recursive: true, force: true });
});

test('cleanup refuses while the agent runs, lists on --dry-run, then removes what the agent installed', async () => {
  const pod = await pool.add('pod');
  const list = confListFromBytes(JSON.stringify({ cniVersion: '1.0.0', name: 'tdlcleanup', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
  await runtime.addNetworkList(list, { containerId: 'tdl-cleanup-pod', netns: pod.path, ifName: 'eth0', args: [['K8S_POD_NAMESPACE', 'default'], ['K8S_POD_NAME', 'web']] });
  const ep = (await agent.client.getEndpoint('container-id:tdl-cleanup-pod')) as Endpoint;
  await agent.client.putService(7, {
    'frontend-address': { ip: '10.96.0.10', port: 80, protocol: 'TCP' },
    'backend-addresses': [{ ip: ep.addresses[0]!.ip, port: 8080 }],
    flags: { type: 'ClusterIP', trafficPolicy: 'Cluster', sessionAffinity: false, sessionAffinityTimeout: 10800 },
  });
  // A route native routing leaves towards another node's pods, over a device that is not tendril's
  // (a veth pair: kernels without the dummy driver have it).
  for (const argv of [
    ['ip', 'link', 'add', 'tdlul', 'type', 'veth', 'peer', 'name', 'tdlulp'],
    ['ip', 'addr', 'add', '192.168.250.1/24', 'dev', 'tdlul'],
    ['ip', 'link', 'set', 'tdlul', 'up'],
    ['ip', 'link', 'set', 'tdlulp', 'up'],
    ['ip', 'route', 'add', '10.252.9.0/24', 'via', '192.168.250.2', 'proto', '212'],
  ]) {
    const r = await pool.exec(node, argv);
    assert.equal(r.code, 0, `${argv.join(' ')}: ${r.stderr}`);
  }
  const routes = await tendrilRoutes();
  assert.deepEqual(routes, ['10.252.9.0/24 proto 212', '10.96.0.10 proto 211']);
  assert.deepEqual(await podHostLinks(pool, node), [ep.hostIfName]);

  const refused = await cleanupCli('--force');
  assert.equal(refused.code, 1, refused.stdout + refused.stderr);
  assert.match(refused.stderr, /another agent owns this node.*stop it first \(nothing was changed\)/);
  assert.ok(await linkExists(pool, node, 'tendril_host'));
  assert.ok(existsSync(agent.stateDir));

  await agent.stop();
  const dry = await cleanupCli('--dry-run');
  assert.equal(dry.code, 0, dry.stderr);
  for (const expected of [/^would remove:$/m, /route +10\.96\.0\.10\/32 .*proto 211/, /route +10\.252\.9\.0\/24 via 192\.168\.250\.2 .*proto 212/, new RegExp(`link +${ep.hostIfName} \\(pod host interface`), /link +tendril_host /, new RegExp(`bpf pins +${bpffsRoot}/tendril$`, 'm'), new RegExp(`directory +${agent.stateDir}$`, 'm')]) {
    assert.match(dry.stdout, expected);
  }
  assert.doesNotMatch(dry.stdout, /tdlul/);
  assert.deepEqual(await tendrilRoutes(), routes, 'the dry run changed no route');
  assert.deepEqual(await podHostLinks(pool, node), [ep.hostIfName]);
  assert.ok(await linkExists(pool, node, 'tendril_host'));
  assert.ok(existsSync(join(bpffsRoot, 'tendril')));
  assert.ok(existsSync(join(agent.stateDir, 'endpoints', String(ep.id))));

  const noTerminal = await cleanupCli();
  assert.equal(noTerminal.code, 2);
  assert.match(noTerminal.stderr, /add --force/);
  assert.ok(await linkExists(pool, node, 'tendril_host'));

  const done = await cleanupCli('--force');
  assert.equal(done.code, 0, done.stdout + done.stderr);
  assert.deepEqual(await tendrilRoutes(), []);
  assert.deepEqual(await podHostLinks(pool, node), []);
  for (const name of ['tendril_host', 'tendril_net', 'tendril_vxlan']) assert.equal(await linkExists(pool, node, name), false, `${name} is gone`);
  assert.equal(await linkExists(pool, pod.name, 'eth0'), false, 'the pod\'s end went with its host interface');
  assert.ok(await linkExists(pool, node, 'tdlul'), 'a device that is not tendril\'s stays');
  assert.equal(existsSync(join(bpffsRoot, 'tendril')), false);
  assert.equal(existsSync(agent.stateDir), false);

  const again = await cleanupCli('--force');
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout, /nothing of tendril's on this node/);
});

test('on a routing-datapath node cleanup removes the nftables table too', async (t) => {
  const routingPool = new NetnsPool('cr');
  let started: SingleNode | undefined;
  // The agent and its state first, then the namespaces.
  t.after(async () => {
    await started?.cleanup();
    await routingPool.cleanup();
  });
  const routing = (started = await startSingleNode(routingPool, { nodeName: 'tdl-node-cr', args: ['--datapath', 'routing', '--pod-cidr', '10.252.1.0/24'] }));
  const pod = await routingPool.add('pod');
  const list = confListFromBytes(JSON.stringify({ cniVersion: '1.0.0', name: 'tdlcleanupr', plugins: [{ type: 'tendril-cni', socket: routing.agent.socket }] }));
  await routing.runtime.addNetworkList(list, { containerId: 'tdl-cleanup-rpod', netns: pod.path, ifName: 'eth0', args: [['K8S_POD_NAMESPACE', 'default'], ['K8S_POD_NAME', 'web']] });
  const hasTable = async () => (await routingPool.exec(routing.node, ['nft', 'list', 'table', 'inet', 'tendril'])).code === 0;
  assert.ok(await hasTable(), 'the routing datapath masquerades with nftables');
  const [hostIf] = await podHostLinks(routingPool, routing.node);
  assert.ok(hostIf !== undefined);
  await routing.agent.stop();

  // No pins on this node: a bpffs root with nothing of tendril's under it.
  const cli = (...args: string[]) => routingPool.exec(routing.node, [AGENT_BIN, 'cleanup', '--state-dir', routing.agent.stateDir, '--lib-dir', join(routing.agent.stateDir, 'lib'), '--bpffs-root', `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`, ...args]);
  const dry = await cli('--dry-run');
  assert.equal(dry.code, 0, dry.stderr);
  assert.match(dry.stdout, /nftables +table inet tendril/);
  assert.match(dry.stdout, new RegExp(`link +${hostIf} \\(pod host interface`));
  assert.doesNotMatch(dry.stdout, /bpf pins/);
  assert.ok(await hasTable());

  const done = await cli('--force');
  assert.equal(done.code, 0, done.stdout + done.stderr);
  assert.equal(await hasTable(), false);
  assert.deepEqual(await podHostLinks(routingPool, routing.node), []);
  assert.equal(await linkExists(routingPool, routing.node, 'tendril_host'), false);
  assert.equal(existsSync(routing.agent.stateDir), false);
});

test('cleanup refuses a system directory as --state-dir or --lib-dir, and a relative one', async () => {
  for (const [flag, dir, message] of [
    ['--state-dir', '/var/run', /--state-dir \/var\/run is a system directory/],
    ['--lib-dir', '/var/lib', /--lib-dir \/var\/lib is a system directory/],
    ['--state-dir', 'tendril', /--state-dir must be an absolute path/],
  ] as const) {
    const r = await run([AGENT_BIN, 'cleanup', '--dry-run', flag, dir]);
    assert.equal(r.code, 2, r.stdout + r.stderr);
    assert.match(r.stderr, message);
    assert.equal(r.stdout, '');
  }
});
