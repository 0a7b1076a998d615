// The agent's own files are not proof of ownership, on the kernel: a real
// agent in a node namespace, tendril-cni exec'd as a runtime execs it.
// - An endpoint record edited to name the node's uplink (a veth of the node's
//   own namespace stands for it: kernels here have no dummy driver) is
//   quarantined at restore; neither DELETE /endpoint nor `tendril-agent
//   cleanup --force` touches the uplink, its address or its route.
// - An embedded kvstore truncated under an agent with a policy: the pinned
//   policy map keeps the policy's entries, the agent reports itself degraded
//   until the loss is confirmed, and the policy revision does not go back.
// - An agent killed in the middle of concurrent ADDs (a fault point, not a
//   timer) leaves veths with no record: the next start removes them, pod
//   side included, before their provisional addresses can expire and be
//   handed out again.
import assert from 'node:assert/strict';
import { mkdir, readdir, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { type RelayRun, runRelay } from '../../src/plugin/testing/runRelay.js';
import { AgentResponseError } from '../../src/client/agentClient.js';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { type CniRuntime, confListFromBytes, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import { AGENT_BIN, type AgentProcess, podAllocations, podHostLinks, startSingleNode } from '../support/agentHarness.js';
import { linkExists, NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';

requireRoot('the endpoint record hardening e2e test');

const EXPIRATION_MS = 1500;
const pool = new NetnsPool('hr');
let node = '';
let agent: AgentProcess;
let runtime: CniRuntime;
let cleanup = async () => {};

const conflist = (): NetworkConfigList => confListFromBytes(JSON.stringify({ cniVersion: '1.1.0', name: 'tdlhrec', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
const rt = (containerId: string, netns: string): RuntimeConf => ({ containerId, netns, ifName: 'eth0', args: [['K8S_POD_NAMESPACE', 'default'], ['K8S_POD_NAME', containerId]] });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, cond: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}
const POLICY = `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: db-from-web, namespace: default }
spec:
  podSelector: { matchLabels: { app: db } }
  ingress:
    - from: [ { podSelector: { matchLabels: { app: web } } } ]
      ports: [ { protocol: TCP, port: 5432 } ]
`;

before(async () => {
  ({ node, agent, runtime, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-hr', args: ['--pod-cidr', '10.245.0.0/24', '--ipam-expiration', String(EXPIRATION_MS)] }));
});

after(async () => {
  await cleanup();
  await pool.cleanup();
});

async function nodeExec(argv: string[]): Promise<string> {
  const r = await pool.exec(node, argv);
  assert.equal(r.code, 0, `${argv.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

/** The uplink's state as the node sees it: the link, its address, the default route over it. */
async function uplink(): Promise<{ exists: boolean; addresses: string; defaultRoute: string }> {
  const exists = await linkExists(pool, node, 'tdlup');
  return {
    exists,
    addresses: exists ? (await nodeExec(['ip', '-4', '-o', 'addr', 'show', 'dev', 'tdlup'])).split(/\s+/).filter((w) => w.includes('/')).join(' ') : '',
    defaultRoute: (await nodeExec(['ip', '-4', 'route', 'show', 'default'])).trim(),
  };
}

describe('an endpoint record that names the node\'s uplink', () => {
  test('restore quarantines it; DELETE /endpoint and cleanup --force leave the uplink, its address and its route', async (t) => {
    const p = await pool.add('p');
    await runtime.addNetworkList(conflist(), rt('tdl-hr-pod', p.path));
    const ep = (await agent.client.getEndpoint('container-id:tdl-hr-pod')) as Endpoint;
    // Also when an assertion fails: the stand-in uplink and the pod's device go (either may be gone already).
    t.after(async () => {
      for (const name of ['tdlup', ep.hostIfName]) await pool.exec(node, ['ip', 'link', 'del', name]);
    });
    for (const argv of [
      ['ip', 'link', 'add', 'tdlup', 'type', 'veth', 'peer', 'name', 'tdlupp'],
      ['ip', 'addr', 'add', '192.168.251.1/24', 'dev', 'tdlup'],
      ['ip', 'link', 'set', 'tdlup', 'up'],
      ['ip', 'link', 'set', 'tdlupp', 'up'],
      ['ip', 'route', 'add', 'default', 'via', '192.168.251.2', 'dev', 'tdlup'],
    ]) {
      await nodeExec(argv);
    }
    const before = await uplink();
    assert.deepEqual(before, { exists: true, addresses: '192.168.251.1/24', defaultRoute: 'default via 192.168.251.2 dev tdlup' });
    const index = (JSON.parse(await nodeExec(['ip', '-j', 'link', 'show', 'dev', 'tdlup'])) as Array<{ ifindex: number }>)[0]!.ifindex;

    await agent.stop();
    const file = join(agent.stateDir, 'endpoints', String(ep.id), 'endpoint.json');
    const record = JSON.parse(await readFile(file, 'utf8')) as Endpoint;
    await writeFile(file, JSON.stringify({ ...record, hostIfName: 'tdlup', hostIfIndex: index, netns: `/var/run/netns/${node}` }));
    await agent.start();

    assert.equal((await agent.client.listEndpoints()).find((e) => e.id === ep.id), undefined, 'the record is not restored as an endpoint');
    const quarantined = await readdir(join(agent.stateDir, 'endpoints', '.quarantine'));
    assert.equal(quarantined.length, 1, quarantined.join(' '));
    assert.match(quarantined[0]!, new RegExp(`^${ep.id}-`));
    assert.equal((await agent.client.health()).quarantinedEndpoints, 1);
    assert.match(agent.output, /tdlup/, 'the agent says which interface the record names');
    await assert.rejects(agent.client.deleteEndpoint(String(ep.id)), (err: unknown) => err instanceof AgentResponseError && err.status === 404);
    assert.deepEqual(await uplink(), before, 'DELETE /endpoint left the uplink');
    assert.ok(await linkExists(pool, p.name, 'eth0'), 'the pod keeps its interface (its own lxc device is not an orphan)');

    await agent.stop();
    const cli = await pool.exec(node, [AGENT_BIN, 'cleanup', '--state-dir', agent.stateDir, '--lib-dir', join(agent.stateDir, 'lib'), '--bpffs-root', '/sys/fs/bpf/tdl-hr-none', '--dry-run']);
    assert.equal(cli.code, 0, cli.stderr);
    assert.doesNotMatch(cli.stdout, /link +tdlup /, cli.stdout);
    assert.match(cli.stdout, /kept +tdlup/, cli.stdout);
    assert.match(cli.stdout, new RegExp(`kept +${ep.hostIfName}: .*node's own namespace`), cli.stdout);
    // A real cleanup too: it removes the agent's state and devices; the agent starts afresh below.
    const forced = await pool.exec(node, [AGENT_BIN, 'cleanup', '--state-dir', agent.stateDir, '--lib-dir', join(agent.stateDir, 'lib'), '--bpffs-root', '/sys/fs/bpf/tdl-hr-none', '--force']);
    assert.equal(forced.code, 0, forced.stdout + forced.stderr);
    assert.deepEqual(await uplink(), before, 'cleanup --force left the uplink');
    // The record names the node's namespace as the pod's: not even its derived interface is provably its own.
    assert.ok(await linkExists(pool, p.name, 'eth0'), 'cleanup left the pod of an untrusted record alone');
    await agent.start();
  });
});

describe('an embedded kvstore truncated under a policy', () => {
  test('the pinned policy map keeps the policy, the agent is degraded until the loss is confirmed, the revision does not go back', async (t) => {
    const db = await pool.add('db');
    const web = await pool.add('web');
    // The pods go also when an assertion fails, so the next test starts from a node without endpoints.
    t.after(async () => {
      for (const [id, ns] of [['tdl-hr-db', db.path], ['tdl-hr-web', web.path]] as const) await runtime.delNetworkList(conflist(), rt(id, ns));
    });
    const labelled = (containerId: string, netns: string, app: string): RuntimeConf => ({ ...rt(containerId, netns), args: [...rt(containerId, netns).args!, ['TENDRIL_LABELS', `app=${app}`]] });
    await runtime.addNetworkList(conflist(), labelled('tdl-hr-db', db.path, 'db'));
    await runtime.addNetworkList(conflist(), labelled('tdl-hr-web', web.path, 'web'));
    const dbId = (await agent.client.getEndpoint('container-id:tdl-hr-db')).id;
    const open = (await agent.client.getBpfPolicy(dbId)).entries;
    await agent.client.putPolicy({ text: POLICY });
    // An import answers once the policy is stored; the endpoints it changes regenerate right after.
    await until('the policy is in db\'s pinned map', async () => JSON.stringify((await agent.client.getBpfPolicy(dbId)).entries) !== JSON.stringify(open));
    const enforced = (await agent.client.getBpfPolicy(dbId)).entries;
    const revision = (await agent.client.getPolicy({})).revision;

    await agent.stop();
    const store = join(agent.stateDir, 'lib', 'kvstore', 'tendril.db');
    await truncate(store, 0);
    for (const f of [`${store}-wal`, `${store}-shm`]) await rm(f, { force: true });
    await agent.start({}, { degraded: true });

    const health = await agent.client.health();
    assert.equal(health.status, 'degraded');
    assert.equal(health.lostPolicies, 1);
    assert.match(agent.output, /lost 1 of the 1 policies.*NetworkPolicy\/default\/db-from-web/);
    assert.deepEqual((await agent.client.getBpfPolicy(dbId)).entries, enforced, 'the pinned map still holds the policy');
    const listed = await agent.client.getPolicy({});
    assert.deepEqual(listed.lost, ['NetworkPolicy/default/db-from-web']);
    assert.ok(listed.revision > revision, `revision ${listed.revision} is above ${revision}`);
    const metrics = await agent.client.metrics();
    assert.match(metrics, /^tendril_policy_lost_policies 1$/m);

    const confirmed = await agent.client.confirmPolicyLoss();
    assert.deepEqual(confirmed.dropped, ['NetworkPolicy/default/db-from-web']);
    assert.equal((await agent.client.health()).status, 'ok');
    await until('confirmed: db is open again', async () => JSON.stringify((await agent.client.getBpfPolicy(dbId)).entries) === JSON.stringify(open));
  });
});

describe('an agent killed in the middle of concurrent ADDs', () => {
  test('the next start removes every attachment with no record, pod side included, before its address can be reused', async (t) => {
    const pods = await Promise.all(Array.from({ length: 20 }, (_, i) => pool.add(`k${i}`)));
    await agent.stop();
    // What an earlier start left: a record so damaged that it names no interface. Its pod, if alive,
    // is one whose address IPAM holds for good; no interrupted ADD's interface can be its.
    const quarantine = join(agent.stateDir, 'endpoints', '.quarantine');
    await mkdir(quarantine, { recursive: true, mode: 0o700 });
    await writeFile(join(quarantine, '99-2026-01-01T00-00-00-000Z'), '{"id":99,"conta');
    await agent.start({ TENDRIL_FAULT_POINT: 'after-datapath' });
    const config = JSON.stringify({ cniVersion: '1.1.0', name: 'tdlhrec', type: 'tendril-cni', socket: agent.socket });
    const runs: RelayRun[] = await Promise.all(
      pods.map((p, i) =>
        runRelay({ CNI_COMMAND: 'ADD', CNI_PATH: '/opt/cni/bin', CNI_CONTAINERID: `tdl-hr-k${i}`, CNI_NETNS: p.path, CNI_IFNAME: 'eth0', CNI_ARGS: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=k${i}`, TENDRIL_CNI_TIMEOUT_MS: '15000' }, config),
      ),
    );
    await agent.waitExit();
    assert.ok(runs.every((r) => r.code !== 0), `every ADD failed: ${runs.map((r) => r.code).join(',')}`);
    const left = [];
    for (const p of pods) if (await linkExists(pool, p.name, 'eth0')) left.push(p.name);
    t.diagnostic(`${left.length} of ${pods.length} pods plumbed when the agent died`);
    assert.ok(left.length > 0, 'the kill left pods plumbed (else this test proves nothing)');

    await agent.start();
    assert.deepEqual(await podHostLinks(pool, node), [], 'no lxc device without a record');
    const plumbed = [];
    for (const p of pods) if (await linkExists(pool, p.name, 'eth0')) plumbed.push(p.name);
    assert.deepEqual(plumbed, [], 'no pod keeps an eth0 the agent does not know');
    await sleep(EXPIRATION_MS + 500);
    assert.deepEqual(await podAllocations(agent), [], 'the provisional addresses expired: nothing is configured on them');
    assert.equal((await agent.client.health()).quarantinedEndpoints, 1);
    await rm(join(quarantine, '99-2026-01-01T00-00-00-000Z'));
  });
});
