// Three agents sharing a real etcd (a cluster in a box): identities agree
// across nodes, the ipcache propagates, and a dead node's entries expire.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { after, before, describe, test } from 'node:test';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { CniRuntime, confListFromBytes, type RuntimeConf } from '../../src/libcni/index.js';
import { AgentProcess, tendrilPluginDir } from '../support/agentHarness.js';
import { ClusterInABox } from '../support/clusterInABox.js';
import { requireRoot } from '../support/root.js';
import { makeScratchDir } from '../support/skelFixture.js';
import { REFERENCE_PLUGIN_DIR } from '../support/tendrilBin.js';

requireRoot('the cluster end-to-end test');

const LEASE_TTL = 3;
let cluster: ClusterInABox;
const agents: AgentProcess[] = [];
let runtime: CniRuntime;
const cleanups: Array<() => Promise<void>> = [];
let podSeq = 0;

interface IpEntry {
  prefix: string;
  identity: number;
  hostIP?: string;
  source: string;
}

async function addPod(agent: AgentProcess, labels: string): Promise<Endpoint> {
  const ns = await cluster.pool.add(`p${podSeq++}`);
  const list = confListFromBytes(JSON.stringify({ cniVersion: '1.0.0', name: 'tdlcluster', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
  const containerId = `tdl-c-${ns.name}`;
  const rt: RuntimeConf = { containerId, netns: ns.path, ifName: 'eth0', args: [['K8S_POD_NAMESPACE', 'prod'], ['K8S_POD_NAME', containerId], ['TENDRIL_LABELS', labels]] };
  await runtime.addNetworkList(list, rt);
  return (await agent.client.getEndpoint(`container-id:${containerId}`)) as Endpoint;
}

async function delPod(agent: AgentProcess, ep: Endpoint): Promise<void> {
  const list = confListFromBytes(JSON.stringify({ cniVersion: '1.0.0', name: 'tdlcluster', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
  await runtime.delNetworkList(list, { containerId: ep.containerId, netns: ep.netns, ifName: 'eth0' });
}

async function ipcacheOf(agent: AgentProcess): Promise<IpEntry[]> {
  return agent.client.request<IpEntry[]>('GET', '/ip');
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

before(async () => {
  cluster = await ClusterInABox.create('cl', 3);
  cleanups.push(() => cluster.cleanup());
  const bin = await tendrilPluginDir();
  cleanups.push(bin.cleanup);
  const scratch = await makeScratchDir();
  cleanups.push(scratch.cleanup);
  runtime = new CniRuntime({ pluginDirs: [bin.dir, REFERENCE_PLUGIN_DIR], cacheDir: join(scratch.dir, 'cache') });
  for (const [i, node] of cluster.nodes.entries()) {
    const agent = await AgentProcess.create({
      nodeNetns: node.netns,
      nodeName: `tdl-node-${i}`,
      args: ['--kvstore', 'etcd', '--kvstore-opt', `etcd.endpoints=${cluster.etcdEndpoint}`, '--ipam', 'block', '--pool-cidr', '10.249.0.0/16', '--node-ip', node.ip, '--lease-ttl', String(LEASE_TTL)],
      // Three agents loading their eBPF programs (the overlay's too: tunnel is the default on etcd) at once.
      startTimeoutMs: 60_000,
    });
    cleanups.push(() => agent.cleanup());
    agents.push(agent);
  }
  await Promise.all(agents.map((a) => a.start()));
});

after(async () => {
  for (const c of cleanups.reverse()) await c();
});

describe('identities across nodes', () => {
  test('equal labels get the same identity on every node; different labels differ', async () => {
    const [a, b, c] = agents as [AgentProcess, AgentProcess, AgentProcess];
    const [webA, webB, webC, db] = await Promise.all([addPod(a, 'app=web'), addPod(b, 'app=web'), addPod(c, 'app=web'), addPod(b, 'app=db')]);
    assert.ok(webA.identity! >= 256, `a global identity, got ${webA.identity}`);
    assert.equal(webB.identity, webA.identity);
    assert.equal(webC.identity, webA.identity);
    assert.notEqual(db.identity, webA.identity);
    assert.deepEqual(webA.identityLabels, ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=prod']);
  });

  test('concurrent pods with one new label set on three nodes share one number', async () => {
    const eps = await Promise.all(agents.flatMap((agent) => [0, 1, 2].map(() => addPod(agent, 'app=burst'))));
    assert.equal(new Set(eps.map((e) => e.identity)).size, 1, JSON.stringify(eps.map((e) => e.identity)));
  });

  test('an identity is released cluster-wide when its last endpoint goes', async () => {
    const [a, b] = agents as [AgentProcess, AgentProcess];
    const ep = await addPod(a, 'app=lonely');
    const id = ep.identity!;
    await waitFor('node B to learn the identity', async () => ((await b.client.request('GET', `/identity/${id}`).catch(() => undefined)) ? true : undefined), 5000);
    await delPod(a, ep);
    await waitFor(
      'the identity to vanish on node B',
      async () => {
        // Only a 404 means gone: a dead agent or a 500 must fail the test, not pass it.
        const gone = await b.client.request('GET', `/identity/${id}`).then(
          () => false,
          (err: unknown) => {
            if ((err as { status?: number }).status === 404) return true;
            throw err;
          },
        );
        return gone ? true : undefined;
      },
      5000,
    );
  });

  test('label changes give the endpoint a new identity', async () => {
    const [a] = agents as [AgentProcess];
    const ep = await addPod(a, 'app=web');
    const changed = await a.client.request<Endpoint>('PATCH', `/endpoint/${ep.id}/labels`, { add: ['tier=front'], delete: ['app'] });
    assert.notEqual(changed.identity, ep.identity);
    assert.deepEqual(changed.identityLabels, ['k8s:io.kubernetes.pod.namespace=prod', 'k8s:tier=front']);
    assert.equal(changed.labelsRevision, 1);
    await assert.rejects(a.client.request('PATCH', `/endpoint/${ep.id}/labels`, { add: ['bad key=x'] }), /invalid|label/i);
  });
});

describe('ipcache across nodes', () => {
  test('a pod created on node A appears in node B\'s ipcache with A as its host', async () => {
    const [a, b] = agents as [AgentProcess, AgentProcess];
    const t0 = performance.now();
    const ep = await addPod(a, 'app=probe');
    const added = performance.now();
    const prefix = `${ep.addresses[0]!.ip}/32`;
    const entry = await waitFor('the entry on node B', async () => (await ipcacheOf(b)).find((e) => e.prefix === prefix), 5000);
    const seen = performance.now();
    assert.equal(entry.identity, ep.identity);
    assert.equal(entry.hostIP, cluster.nodes[0]!.ip);
    assert.equal(entry.source, 'kvstore');
    console.log(`ipcache propagation A→B: ${(seen - added).toFixed(1)} ms after ADD returned (ADD took ${(added - t0).toFixed(1)} ms)`);
  });

  test('killing node A (no clean shutdown) removes its entries elsewhere once its lease expires', async () => {
    const [a, b] = agents as [AgentProcess, AgentProcess];
    const aIp = cluster.nodes[0]!.ip;
    assert.ok((await ipcacheOf(b)).some((e) => e.hostIP === aIp), 'B knows A\'s pods');
    await a.kill();
    const t0 = performance.now();
    await waitFor('A\'s entries to leave B\'s ipcache', async () => ((await ipcacheOf(b)).some((e) => e.hostIP === aIp) ? undefined : true), (LEASE_TTL + 10) * 1000);
    console.log(`dead node's ipcache entries gone after ${(performance.now() - t0).toFixed(0)} ms (lease TTL ${LEASE_TTL} s)`);
  });
});
