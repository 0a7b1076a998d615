// The agent following a Kubernetes API server: a real agent (embedded
// kvstore, API socket, fake datapath) started in-process against the fake
// API server of test/support (plain HTTP on loopback; no real API server can
// run here). Pods' labels reach CNI ADD, a pod the API does not have is
// "try again", /healthz fails until the first sync, --ipam kubernetes takes
// the Node's pod CIDRs, the Node's addresses reach the registry, and
// /status and `tendril status` show the connection.
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { pino } from 'pino';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { FakeKubeApi } from '../../test/support/fakeKubeApi.js';
import { endpointSliceObject, namespaceObject, networkPolicyObject, nodeObject, podObject, serviceObject } from '../../test/support/k8sObjects.js';
import { requireRoot } from '../../test/support/root.js';
import { run } from '../../test/support/run.js';
import { FakeDatapath } from '../datapath/fake/fakeDatapath.js';
import { AgentError } from '../api/errors.js';
import type { K8sStatus } from '../api/types.js';
import { AgentClient, AgentResponseError } from '../client/agentClient.js';
import { kubernetesLine } from '../cli/agentCommands.js';
import { runCli } from '../cli/testing/cliProcess.js';
import { resolveConfig } from './agentCli.js';
import { ConfigError } from './config.js';
import type { Logger } from '../logging/logger.js';
import { type FakeNodeAgent, type FakeNodeExtras, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

const CONF = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlk8s', type: 'tendril-cni' });
const RETRY = { initialMs: 100, maxMs: 400 };
const AGENT_MAIN = fileURLToPath(new URL('./main.js', import.meta.url));

let kube: FakeKubeApi;
let kubeconfig: string;
const started: FakeNodeAgent[] = [];
let pods = 0;

beforeEach(async () => {
  kube = await FakeKubeApi.start({ bookmarkIntervalMs: 200, crds: 'tendril' });
  // As in every cluster: the agents' node Leases (crd mode, the default here) live there.
  kube.create('namespaces', namespaceObject('kube-system'));
  kubeconfig = await kube.kubeconfig();
});

afterEach(async () => {
  for (const n of started.splice(0)) await n.stop();
  await kube.stop();
});

/** Pods of service account shop-sa, not the default one: the first test checks the label that comes of it. */
const shopPod = (namespace: string, name: string, nodeName: string, labels: Record<string, string>) => podObject({ namespace, name, nodeName, labels, serviceAccount: 'shop-sa' });

/** The API server's view the start tests begin from: the Node (no pod CIDRs), namespace shop, and pods web-1… (app=web) on the node. */
function seedShop(nodeName: string, nodeIp: string, webPods: number): void {
  kube.create('nodes', nodeObject(nodeName, undefined, [{ type: 'InternalIP', address: nodeIp }]));
  kube.create('namespaces', namespaceObject('shop'));
  for (let i = 1; i <= webPods; i++) kube.create('pods', shopPod('shop', `web-${i}`, nodeName, { app: 'web' }));
}

async function startAgent(nodeName: string, extras: FakeNodeExtras & { podCidr?: string; podWaitMs?: number; syncTimeoutSeconds?: number; logger?: Logger } = {}): Promise<FakeNodeAgent> {
  const node = await startFakeNodeAgent({
    nodeName,
    ...(extras.logger ? { logger: extras.logger } : {}),
    podCidr: extras.podCidr ?? '10.88.7.0/24',
    config: { k8sKubeconfig: kubeconfig, k8sSyncTimeoutSeconds: extras.syncTimeoutSeconds ?? 10, ...extras.config },
    kubernetes: { podWaitMs: extras.podWaitMs ?? 2000, retry: RETRY, ...extras.kubernetes },
  });
  started.push(node);
  return node;
}

function add(node: FakeNodeAgent, containerId: string, args: string) {
  const netns = `/var/run/netns/tdlk8s${pods++}`;
  node.datapath.addNetns(netns);
  return node.agent.api().cni.handle({ command: 'ADD', containerId, netns, ifName: 'eth0', args, config: CONF });
}

async function until<T>(what: string, fn: () => Promise<T | undefined> | T | undefined, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

describe('CNI ADD with Kubernetes on', () => {
  test('an ADD naming a pod takes the API server\'s labels (pod, namespace, service account) with the runtime\'s other labels; a relabel in the API reaches the endpoint', async () => {
    const NODE = 'tdl-k8s-labels';
    kube.create('namespaces', namespaceObject('shop', { team: 'blue' }));
    kube.create('nodes', nodeObject(NODE, undefined, [{ type: 'InternalIP', address: '192.0.2.31' }]));
    kube.create('pods', shopPod('shop', 'web-1', NODE, { app: 'web', tier: 'front' }));
    const node = await startAgent(NODE);
    const client = new AgentClient({ socketPath: node.config.socket, timeoutMs: 10_000 });

    await add(node, 'tdl-k8s-web-1', 'K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-1;TENDRIL_LABELS=container:build=7,tier=back');
    const ep = await client.getEndpoint('pod-name:shop:web-1');
    assert.deepEqual(
      [...ep.labels].sort(),
      [
        'container:build=7',
        'k8s:app=web',
        'k8s:io.kubernetes.pod.namespace=shop',
        'k8s:io.tendril.k8s.namespace.labels.kubernetes.io/metadata.name=shop',
        'k8s:io.tendril.k8s.namespace.labels.team=blue',
        'k8s:io.tendril.k8s.policy.serviceaccount=shop-sa',
        // The API server's value wins over the runtime's for the same key.
        'k8s:tier=front',
      ],
    );

    kube.update('pods', shopPod('shop', 'web-1', NODE, { app: 'api', tier: 'front' }));
    const relabelled = await until('the endpoint relabelled from the API', async () => {
      const e = await client.getEndpoint(ep.id);
      return e.labels.includes('k8s:app=api') && e.state === 'ready' ? e : undefined;
    });
    assert.ok(relabelled.labels.includes('container:build=7'), 'the runtime\'s container label stays');
    assert.ok(!relabelled.labels.includes('k8s:app=web'));
    assert.notEqual(relabelled.identity, ep.identity, 'new labels, new identity');
  });

  test('an ADD for a pod the API server does not have is CNI code 11 after the pod wait, names the pod, and creates nothing', async () => {
    const NODE = 'tdl-k8s-nopod';
    kube.create('nodes', nodeObject(NODE, undefined, [{ type: 'InternalIP', address: '192.0.2.32' }]));
    // On another node: not among this node's pods.
    kube.create('pods', shopPod('shop', 'elsewhere', 'tdl-k8s-other', { app: 'web' }));
    const node = await startAgent(NODE, { podWaitMs: 300 });
    for (const name of ['ghost', 'elsewhere']) {
      const t0 = Date.now();
      await assert.rejects(add(node, `tdl-k8s-${name}`, `K8S_POD_NAMESPACE=shop;K8S_POD_NAME=${name}`), (err: unknown) => {
        assert.ok(err instanceof AgentError, String(err));
        assert.equal(err.cniCode, 11, err.message);
        assert.match(err.message, new RegExp(`pod shop/${name} `));
        return true;
      });
      const took = Date.now() - t0;
      assert.ok(took >= 250 && took < 3000, `answered after ${took} ms (pod wait 300 ms)`);
    }
    const api = node.agent.api();
    assert.deepEqual(api.endpoints.list(), []);
    assert.deepEqual((await api.ipam.list()).filter((a) => !a.owner.startsWith('tendril:router')), []);
    assert.deepEqual(await node.datapath.listPodHostInterfaces(), []);
    // Without pod arguments nothing is waited for: today's behaviour.
    const r = await add(node, 'tdl-k8s-plain', 'TENDRIL_LABELS=app=plain');
    assert.match(r.result!.ips![0]!.address, /^10\.88\.7\.\d+\/32$/);
  });
});

describe('start order', () => {
  test('after a restart the API server\'s policies and labels are in force at the restored endpoint\'s first regeneration; the watchers stop with the agent', async () => {
    const NODE = 'tdl-k8s-restart';
    seedShop(NODE, '192.0.2.34', 1);
    let node = await startAgent(NODE);
    await add(node, 'tdl-k8s-restart-1', 'K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-1');
    const id = node.agent.api().endpoints.list()[0]!.id;
    const before = node.datapath.endpointState(id)!;
    assert.ok(kube.openWatches > 0);

    const syncsBefore = node.datapath.syncs.length;
    const index = started.indexOf(node);
    node = await node.restart(async () => {
      await until('every watch closed at agent stop', () => (kube.openWatches === 0 ? true : undefined), 3000);
      // While the agent is down: a default-deny ingress policy for the pod, and a new label on it.
      kube.create('networkpolicies', networkPolicyObject('shop', 'deny-web', { podSelector: { matchLabels: { app: 'web' } }, policyTypes: ['Ingress'] }));
      kube.update('pods', shopPod('shop', 'web-1', NODE, { app: 'web', version: '2' }));
    });
    started[index] = node;
    const afterRestart = node.datapath.syncs.slice(syncsBefore).filter((x) => x.id === id);
    assert.ok(afterRestart.length > 0, 'the restored endpoint was regenerated');
    const last = node.datapath.endpointState(id)!;
    assert.notDeepEqual(last.policy.entries, before.policy.entries, 'the policy changed the endpoint\'s map state');
    for (const x of afterRestart) assert.deepEqual(x.policy.entries, last.policy.entries, 'every regeneration after restore, the first included, already holds the policy');
    const api = node.agent.api();
    assert.ok(api.policy.list({}).some((p) => p.name.name === 'deny-web' && p.name.namespace === 'shop'));
    const ep = api.endpoints.list().find((e) => e.id === id)!;
    assert.ok(ep.labels.includes('k8s:version=2'), `labels reconciled before ready: ${ep.labels.join(' ')}`);
    assert.equal(node.datapath.endpointState(id)!.identity, ep.identity);
  });
});

describe('NetworkPolicy with a named port', () => {
  test('is refused with the port named (logged, the policy left out); one with the port number is applied', async () => {
    const NODE = 'tdl-k8s-namedport';
    seedShop(NODE, '192.0.2.35', 1);
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: 'info' }, { write: (t: string) => void lines.push(JSON.parse(t) as Record<string, unknown>) });
    const node = await startAgent(NODE, { logger });
    const ingress = (port: string | number) => [{ from: [{ podSelector: { matchLabels: { app: 'web' } } }], ports: [{ protocol: 'TCP', port }] }];
    kube.create('networkpolicies', networkPolicyObject('shop', 'db-named', { podSelector: { matchLabels: { app: 'db' } }, policyTypes: ['Ingress'], ingress: ingress('postgres') }));
    kube.create('networkpolicies', networkPolicyObject('shop', 'db-number', { podSelector: { matchLabels: { app: 'db' } }, policyTypes: ['Ingress'], ingress: ingress(5432) }));
    const api = node.agent.api();
    await until('the numbered policy applied', () => (api.policy.list({}).some((p) => p.name.name === 'db-number') ? true : undefined));
    const refused = await until('the named port refusal logged', () => lines.find((l) => /named port .{0,2}postgres.{0,2} in NetworkPolicy\/shop\/db-named/.test(JSON.stringify(l))));
    assert.equal(refused.level, 50, JSON.stringify(refused));
    assert.ok(!api.policy.list({}).some((p) => p.name.name === 'db-named'), 'the named-port policy is not in force');
  });
});

describe('services', () => {
  test('with a load-balancing datapath, the API server\'s Services and EndpointSlices are in the service API when the agent is ready, and follow scaling', async () => {
    const NODE = 'tdl-k8s-svc';
    kube.create('nodes', nodeObject(NODE, undefined, [{ type: 'InternalIP', address: '192.0.2.35' }]));
    kube.create('services', serviceObject('shop', 'web', { clusterIP: '10.96.0.10', ports: [{ name: 'http', port: 80, targetPort: 8080 }] }));
    const slice = (name: string, ips: string[]) => endpointSliceObject('shop', name, 'web', ips.map((ip) => ({ ip })), [{ name: 'http', port: 8080 }]);
    kube.create('endpointslices', slice('web-a', ['10.88.8.11', '10.88.8.12']));
    const node = await startFakeNodeAgent({
      nodeName: NODE,
      podCidr: '10.88.8.0/24',
      datapath: new FakeDatapath({ nodeLinks: ['eth0'], loadBalancer: true }),
      config: { k8sKubeconfig: kubeconfig, k8sSyncTimeoutSeconds: 10 },
      kubernetes: { retry: RETRY },
    });
    started.push(node);
    const client = new AgentClient({ socketPath: node.config.socket, timeoutMs: 10_000 });
    const backends = async () => (await client.listServices()).flatMap((x) => x['backend-addresses'].map((b) => `${x['frontend-address'].ip}:${x['frontend-address'].port}>${b.ip}:${b.port}`)).sort();
    assert.deepEqual(await backends(), ['10.96.0.10:80>10.88.8.11:8080', '10.96.0.10:80>10.88.8.12:8080'], 'in force at ready, nothing waited for');
    kube.create('endpointslices', slice('web-b', ['10.88.8.13']));
    await until('scaled up', async () => ((await backends()).length === 3 ? true : undefined));
    const resources = (await client.status()).kubernetes!.resources.map((r) => r.resource);
    for (const r of ['services', 'endpointslices']) assert.ok(resources.includes(r), `${r} watched: ${resources.join(', ')}`);
    // Kubernetes' IDs are not the API's to write: a user's service there would be deleted at the next start as Kubernetes' leftover.
    const k8sId = (await client.listServices())[0]!.id;
    const spec = { 'frontend-address': { ip: '10.96.7.7', port: 80, protocol: 'TCP' as const }, 'backend-addresses': [{ ip: '10.88.8.11', port: 8080 }], flags: { type: 'ClusterIP' as const } };
    for (const attempt of [() => client.putService(40_000, spec), () => client.deleteService(k8sId)]) {
      await assert.rejects(attempt(), (err: unknown) => err instanceof AgentResponseError && err.status === 409 && /Kubernetes Services' frontends/.test(err.message));
    }
    await client.putService(7, spec);
    assert.equal((await client.listServices()).length, 2, 'a user service below the range is taken');
  });
});

describe('health and status', () => {
  test('/healthz is 503 naming the resources not synced while the API server is away at start; /status and tendril status say so; synced once it is back', async () => {
    const NODE = 'tdl-k8s-health';
    seedShop(NODE, '192.0.2.33', 2);
    await kube.pause();
    const t0 = Date.now();
    // The kvstore mode: crd mode's node registry needs the API server to start (its own TendrilNode and Lease go up first).
    const node = await startAgent(NODE, { syncTimeoutSeconds: 1, podWaitMs: 200, config: { identityAllocationMode: 'kvstore' } });
    assert.ok(Date.now() - t0 < 15_000, 'the start goes on after the sync timeout');
    const client = new AgentClient({ socketPath: node.config.socket, timeoutMs: 10_000 });

    await assert.rejects(client.health(), (err: unknown) => {
      assert.ok(err instanceof AgentResponseError, String(err));
      assert.equal(err.status, 503);
      assert.equal(err.body.code, 'NOT_READY');
      assert.match(err.message, /Kubernetes not synced yet \(API server http:\/\/127\.0\.0\.1:\d+, not connected\): .*pods/);
      assert.match(err.message, /namespaces/);
      return true;
    });
    const before = await client.status();
    assert.equal(before.status, 'degraded');
    assert.equal(before.kubernetes?.synced, false);
    assert.equal(before.kubernetes?.connected, false);
    assert.equal(before.kubernetes?.apiServer, kube.url);
    const cliBefore = await runCli(['status', '--socket', node.config.socket]);
    assert.equal(cliBefore.code, 1, cliBefore.stderr);
    assert.match(cliBefore.stdout, new RegExp(`Kubernetes +DISCONNECTED from ${kube.url.replace(/\./g, '\\.')}, NOT SYNCED \\(waiting for .*pods`));
    // A pod cannot be known yet: the runtime is told to try again.
    await assert.rejects(add(node, 'tdl-k8s-early', 'K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-1'), (err: unknown) => err instanceof AgentError && err.cniCode === 11);

    await kube.resume();
    // Synced (listed) comes a moment before every watch is connected again: ok needs both.
    const h = await until('/healthz 200 and ok after the API server came back', async () => {
      try {
        const got = await client.health();
        return got.status === 'ok' ? got : undefined;
      } catch (err) {
        if (err instanceof AgentResponseError && err.status === 503) return undefined;
        throw err;
      }
    }, 15_000);
    assert.equal(h.status, 'ok');
    const k = h.kubernetes!;
    assert.equal(k.synced, true);
    assert.equal(k.connected, true);
    const byName = new Map(k.resources.map((r) => [r.resource, r]));
    for (const r of ['pods', 'namespaces', 'nodes', 'networkpolicies']) assert.equal(byName.get(r)?.synced, true, r);
    assert.equal(byName.get('pods')?.objects, 2);
    assert.equal(byName.get('namespaces')?.objects, 2, 'shop and kube-system');
    assert.ok((byName.get('pods')?.restarts ?? 0) >= 1, 'the pods watch was restarted after the failures');
    await add(node, 'tdl-k8s-late', 'K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-1');
    assert.ok((await client.getEndpoint('pod-name:shop:web-1')).labels.includes('k8s:app=web'));

    const cli = await runCli(['status', '--socket', node.config.socket]);
    assert.equal(cli.code, 0, cli.stderr);
    assert.match(cli.stdout, new RegExp(`Kubernetes +connected to ${kube.url.replace(/\./g, '\\.')}, synced \\(.*pods 2.*namespaces 2.*\\), last event \\d+s ago`));
    const json = await runCli(['status', '--socket', node.config.socket, '-o', 'json']);
    assert.equal(json.code, 0, json.stderr);
    const parsed = JSON.parse(json.stdout) as { kubernetes?: K8sStatus };
    assert.equal(parsed.kubernetes?.synced, true);
    assert.equal(parsed.kubernetes?.apiServer, kube.url);
  });

  test('the Kubernetes line: synced with counts and the last event, or what is missing and the last error', () => {
    const now = Date.parse('2026-01-01T00:00:10Z');
    const synced: K8sStatus = {
      apiServer: 'https://10.0.0.1:6443',
      connected: true,
      synced: true,
      resources: [
        { resource: 'pods', synced: true, objects: 3, events: 5, restarts: 0, lastEventAt: '2026-01-01T00:00:08Z' },
        { resource: 'namespaces', synced: true, objects: 2, events: 2, restarts: 0, lastEventAt: '2026-01-01T00:00:01Z' },
      ],
    };
    assert.equal(kubernetesLine(synced, now), 'connected to https://10.0.0.1:6443, synced (pods 3, namespaces 2), last event 2s ago');
    const down: K8sStatus = {
      ...synced,
      connected: false,
      synced: false,
      resources: [
        { resource: 'pods', synced: true, objects: 3, events: 5, restarts: 2, lastEventAt: '2026-01-01T00:00:08Z', lastError: 'connect ECONNREFUSED' },
        { resource: 'nodes', synced: false, objects: 0, events: 0, restarts: 2 },
      ],
    };
    assert.equal(kubernetesLine(down, now), 'DISCONNECTED from https://10.0.0.1:6443, NOT SYNCED (waiting for nodes), last event 2s ago, last error pods: connect ECONNREFUSED');
  });
});

describe('the Node', () => {
  test('--ipam kubernetes numbers pods from the Node\'s spec.podCIDRs; the Node\'s InternalIP is the node IP and its ExternalIP reaches the registry', async () => {
    const NODE = 'tdl-k8s-ipam';
    kube.create(
      'nodes',
      nodeObject(NODE, ['10.77.3.0/24'], [
        { type: 'InternalIP', address: '192.0.2.20' },
        { type: 'ExternalIP', address: '203.0.113.20' },
        { type: 'Hostname', address: NODE },
      ]),
    );
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: 'info' }, { write: (t: string) => void lines.push(JSON.parse(t) as Record<string, unknown>) });
    const node = await startAgent(NODE, { config: { ipam: 'kubernetes', podCidrs: [] }, logger });
    const client = new AgentClient({ socketPath: node.config.socket, timeoutMs: 10_000 });
    const config = await client.getConfig();
    assert.equal(config.ipam, 'kubernetes');
    assert.deepEqual(config.podCidr, ['10.77.3.0/24']);
    assert.equal(config.nodeIp, '192.0.2.20');

    const r = await add(node, 'tdl-k8s-ipam-a', 'TENDRIL_LABELS=app=a');
    assert.match(r.result!.ips![0]!.address, /^10\.77\.3\.\d+\/32$/);
    assert.equal(r.result!.ips![0]!.gateway, '10.77.3.1');
    assert.equal((await client.listIpam()).mode, 'kubernetes');

    const own = await until('the own record with the Node addresses', async () => {
      const n = await client.getNode(NODE);
      return n.addresses.some((a) => a.type === 'ExternalIP') ? n : undefined;
    });
    assert.deepEqual(own.addresses, [
      { type: 'InternalIP', ip: '192.0.2.20' },
      { type: 'ExternalIP', ip: '203.0.113.20' },
      { type: 'RouterIP', ip: '10.77.3.1' },
    ]);
    assert.deepEqual(own.podCidrs, ['10.77.3.0/24']);
    const synced = lines.find((l) => l.msg === 'Kubernetes synced');
    assert.equal(synced?.apiServer, kube.url, 'the start is logged with the API server');
    assert.equal(typeof synced?.syncMs, 'number', 'and the sync time');

    // The Node changes: a new ExternalIP reaches the registry; new pod CIDRs are only warned about.
    kube.update(
      'nodes',
      nodeObject(NODE, ['10.77.9.0/24'], [
        { type: 'InternalIP', address: '192.0.2.20' },
        { type: 'ExternalIP', address: '203.0.113.99' },
      ]),
    );
    await until('the new ExternalIP in the registry', async () => ((await client.getNode(NODE)).addresses.some((a) => a.ip === '203.0.113.99') ? true : undefined));
    const warned = await until('the pod CIDR change warned about', () => lines.find((l) => l.level === 40 && /spec\.podCIDRs changed/.test(String(l.msg))));
    assert.deepEqual(warned.now, ['10.77.9.0/24']);
    assert.deepEqual((await client.getNode(NODE)).podCidrs, ['10.77.3.0/24'], 'no live re-addressing');
    const second = await add(node, 'tdl-k8s-ipam-b', 'TENDRIL_LABELS=app=b');
    assert.match(second.result!.ips![0]!.address, /^10\.77\.3\.\d+\/32$/);

    // A release gives the address back, as host-scope does.
    const ip = r.result!.ips![0]!.address.split('/')[0]!;
    await node.agent.api().cni.handle({ command: 'DEL', containerId: 'tdl-k8s-ipam-a', netns: '', ifName: 'eth0', args: '', config: CONF });
    assert.ok(!(await client.listIpam()).allocations.some((a) => a.ip === ip));
  });

  test('--ipam kubernetes with both families in spec.podCIDRs: a pod gets one address of each, the own record both CIDRs and the IPv6 InternalIP', async () => {
    const NODE = 'tdl-k8s-dual';
    kube.create(
      'nodes',
      nodeObject(NODE, ['10.77.5.0/24', 'fd00:77:5::/112'], [
        { type: 'InternalIP', address: '192.0.2.25' },
        { type: 'InternalIP', address: '2001:db8::25' },
      ]),
    );
    const node = await startAgent(NODE, { config: { ipam: 'kubernetes', podCidrs: [], datapath: 'bpf', routingMode: 'native' } });
    const client = new AgentClient({ socketPath: node.config.socket, timeoutMs: 10_000 });
    assert.deepEqual((await client.getConfig()).podCidr, ['10.77.5.0/24', 'fd00:77:5::/112']);
    const r = await add(node, 'tdl-k8s-dual-a', 'TENDRIL_LABELS=app=a');
    const ips = r.result!.ips!.map((a) => [a.address, a.gateway]);
    assert.equal(ips.length, 2, JSON.stringify(ips));
    assert.match(ips[0]![0]!, /^10\.77\.5\.\d+\/32$/);
    assert.equal(ips[0]![1], '10.77.5.1');
    assert.match(ips[1]![0]!, /^fd00:77:5::[0-9a-f]+\/128$/);
    assert.equal(ips[1]![1], 'fd00:77:5::1');
    assert.ok(r.result!.routes!.some((x) => x.dst === '::/0' && x.gw === 'fd00:77:5::1'));
    const own = await until('the own record with both families', async () => {
      const n = await client.getNode(NODE);
      return n.addresses.some((a) => a.ip === '2001:db8::25') ? n : undefined;
    });
    assert.deepEqual(own.podCidrs, ['10.77.5.0/24', 'fd00:77:5::/112']);
    assert.deepEqual(own.addresses.filter((a) => a.type === 'RouterIP').map((a) => a.ip), ['10.77.5.1', 'fd00:77:5::1']);
    // DEL frees both.
    await node.agent.api().cni.handle({ command: 'DEL', containerId: 'tdl-k8s-dual-a', netns: '', ifName: 'eth0', args: '', config: CONF });
    assert.deepEqual((await client.listIpam()).allocations.filter((a) => !a.owner.startsWith('tendril:router')), []);
  });

  test('--ipam kubernetes refuses to start without pod CIDRs on the Node, without a Node, or without Kubernetes', async () => {
    kube.create('nodes', nodeObject('tdl-k8s-nocidr', undefined, [{ type: 'InternalIP', address: '192.0.2.21' }]));
    await assert.rejects(
      startAgent('tdl-k8s-nocidr', { config: { ipam: 'kubernetes', podCidrs: [] } }),
      (err: unknown) => err instanceof ConfigError && /Node tdl-k8s-nocidr has no spec\.podCIDRs/.test(err.message),
    );
    const t0 = Date.now();
    await assert.rejects(
      startAgent('tdl-k8s-nonode', { config: { ipam: 'kubernetes', podCidrs: [] }, syncTimeoutSeconds: 1 }),
      (err: unknown) => err instanceof ConfigError && /--ipam kubernetes: Node "tdl-k8s-nonode" not found/.test(err.message),
    );
    assert.ok(Date.now() - t0 < 5000, 'bounded by the sync timeout');
    await until('the failed starts\' watches closed', () => (kube.openWatches === 0 ? true : undefined), 3000);

    assert.equal(process.env.KUBERNETES_SERVICE_HOST, undefined, 'the test runs outside a pod');
    await assert.rejects(resolveConfig({ ipam: 'kubernetes' }), (err: unknown) => err instanceof ConfigError && /--ipam kubernetes needs Kubernetes/.test(err.message));
    await assert.rejects(resolveConfig({ ipam: 'kubernetes', k8sApiServer: 'http://127.0.0.1:1', podCidr: ['10.0.0.0/24'] }), (err: unknown) => err instanceof ConfigError && /leave out --pod-cidr/.test(err.message));
    await assert.rejects(resolveConfig({ k8sApiServer: 'ftp://x' }), (err: unknown) => err instanceof ConfigError && /k8sApiServer/.test(err.message));
    // tendril-agent itself: one line, exit code 2, nothing created (in a network namespace of its own, so its node lock is its own).
    requireRoot('running tendril-agent');
    const dir = await mkdtemp(join(tmpdir(), 'tdl-k8s-main-'));
    try {
      const agent = (args: string[]) => run(['unshare', '-n', process.execPath, AGENT_MAIN, '--state-dir', join(dir, 'state'), '--lib-dir', join(dir, 'lib'), '--node-name', 'tdl-k8s-main', '--log-level', 'error', ...args]);
      for (const [args, message] of [
        [['--ipam', 'kubernetes'], /^tendril-agent: --ipam kubernetes needs Kubernetes: /],
        [['--pod-cidr', '10.1.0.0/24', '--k8s-kubeconfig', join(dir, 'missing')], /^tendril-agent: cannot load kubeconfig .*missing: /],
        // The fake listens in this test's namespace, not the agent's: an API server out of reach.
        [['--ipam', 'kubernetes', '--k8s-kubeconfig', kubeconfig, '--k8s-sync-timeout', '1'], /^tendril-agent: --ipam kubernetes: Node "tdl-k8s-main" not found in the Kubernetes API after 1000 ms \(last error: .*ENETUNREACH/],
      ] as const) {
        const r = await agent([...args]);
        assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
        assert.match(r.stderr, message);
        assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
        assert.deepEqual(await readdir(dir), [], 'nothing created');
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }

    const ok = await resolveConfig({ ipam: 'kubernetes', k8sKubeconfig: 'relative/kubeconfig', k8sSyncTimeout: 5 });
    assert.equal(ok.k8sKubeconfig, `${process.cwd()}/relative/kubeconfig`);
    assert.equal(ok.k8sSyncTimeoutSeconds, 5);
    assert.equal((await resolveConfig({ podCidr: ['10.0.0.0/24'] })).k8sSyncTimeoutSeconds, 60);
  });
});
