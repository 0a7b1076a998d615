// A pod in namespace `evil` must not pass a NetworkPolicy whose
// namespaceSelector is `team: trusted` by claiming the trusted namespace's
// label itself (Cilium's CVE-2023-39347 through the CNI door): the keys
// Kubernetes derives come only from K8S_POD_NAMESPACE and the API server.
// Real packets between pod namespaces on an agent with the eBPF datapath
// following the fake API server; tendril-cni exec'd as kubelet would, with
// TENDRIL_LABELS added to kubelet's CNI_ARGS.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { CniErrorCode } from '../../src/cni/index.js';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { assertCniError, cniEnv, runRelay } from '../../src/plugin/testing/runRelay.js';
import { podObject } from '../support/k8sObjects.js';
import { k8sSceneHooks, kubeletCniArgs, type K8sPod, networkPolicyObject, waitAllRealized } from '../support/k8sScene.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';

requireRoot('the derived labels e2e test');

const TRUSTED = 'tdl-dl-trusted';
const EVIL = 'evil';
const PORT = 8080;
const PROBE_MS = 300;

let db: K8sPod;
let friend: K8sPod;
let control: K8sPod;

const scene = k8sSceneHooks('dl', { nodeName: 'tdl-node-dl', podCidr: '10.243.0.0/24', namespaces: { [TRUSTED]: { team: 'trusted' }, [EVIL]: {} }, tcpPorts: [PORT] }, async (s) => {
  db = await s.addPod({ name: 'db', namespace: TRUSTED, labels: { app: 'db' } });
  friend = await s.addPod({ name: 'friend', namespace: TRUSTED, labels: { app: 'client' } });
  control = await s.addPod({ name: 'control', namespace: EVIL, labels: { app: 'client' } });
  s.fake.create('networkpolicies', networkPolicyObject(TRUSTED, 'db-from-trusted', {
    podSelector: { matchLabels: { app: 'db' } },
    policyTypes: ['Ingress'],
    ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: 'trusted' } } }], ports: [{ protocol: 'TCP', port: PORT }] }],
  }));
});

// The attacker's sandbox is not the scene's (its ADD must fail): a namespace of this file's own.
const sandboxes = new NetnsPool('dlx');
after(() => sandboxes.cleanup());

async function verdict(from: K8sPod): Promise<'answered' | 'timed out'> {
  const r = await scene().agent(from.key).tcpOnce({ dst: db.ip, port: PORT }, PROBE_MS);
  if (r.outcome === 'open') return 'answered';
  if (r.outcome === 'timeout') return 'timed out';
  throw new Error(`${from.key} -> db: ${r.outcome} ${r.detail ?? ''}`);
}

async function untilEnforced(timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await scene().node.agent.client.getPolicy()).policies.length === 0) {
    if (Date.now() > deadline) throw new Error('the NetworkPolicy never reached the agent');
    await new Promise((r) => setTimeout(r, 50));
  }
  await waitAllRealized(scene().node, timeoutMs);
}

test('the namespaceSelector holds on packets: the trusted namespace\'s pod is answered, the control pod in evil times out', async () => {
  await untilEnforced();
  assert.deepEqual({ friend: await verdict(friend), control: await verdict(control) }, { friend: 'answered', control: 'timed out' });
  // K8S_POD_NAMESPACE (and the API server) still give the namespace and its labels.
  const labelsOf = async (p: K8sPod) => ((await scene().endpoint(p)) as Endpoint).labels;
  assert.ok((await labelsOf(control)).includes(`k8s:io.kubernetes.pod.namespace=${EVIL}`), JSON.stringify(await labelsOf(control)));
  assert.ok((await labelsOf(friend)).includes(`k8s:io.kubernetes.pod.namespace=${TRUSTED}`));
  assert.ok((await labelsOf(friend)).includes('k8s:io.tendril.k8s.namespace.labels.team=trusted'));
});

test('a pod in evil claiming io.tendril.k8s.namespace.labels.team=trusted in CNI_ARGS is refused at ADD with code 7 naming the key; nothing is made', async () => {
  const s = scene();
  const spec = { name: 'attacker', namespace: EVIL, labels: { app: 'client' } };
  const created = s.fake.create('pods', podObject({ ...spec, nodeName: s.nodeName }));
  const sandbox = await sandboxes.add('attacker');
  const containerId = 'tdl-dl-attacker';
  const before = (await s.node.agent.client.listEndpoints()).length;
  for (const claim of ['io.tendril.k8s.namespace.labels.team=trusted', 'k8s:io.cilium.k8s.namespace.labels.team=trusted', `io.kubernetes.pod.namespace=${TRUSTED}`]) {
    const args = [...kubeletCniArgs(spec, containerId, created.metadata.uid ?? ''), ['TENDRIL_LABELS', encodeURIComponent(claim)]].map(([k, v]) => `${k}=${v}`).join(';');
    const r = await runRelay(
      cniEnv('ADD', { CNI_CONTAINERID: containerId, CNI_NETNS: sandbox.path, CNI_IFNAME: 'eth0', CNI_ARGS: args }),
      JSON.stringify({ cniVersion: '1.0.0', name: 'tdlk8s', type: 'tendril-cni', socket: s.node.agent.socket }),
    );
    const key = claim.replace(/^k8s:/, '').split('=')[0]!;
    assertCniError(r, CniErrorCode.InvalidNetworkConfig, new RegExp(`"${key.replace(/\./g, '\\.')}".*derived from Kubernetes`));
  }
  assert.equal((await s.node.agent.client.listEndpoints()).length, before, 'no endpoint was created');
  assert.equal((await sandboxes.exec(sandbox.name, ['ip', 'link', 'show', 'dev', 'eth0'])).code, 1, 'no interface in the sandbox');
});

test('the same claim as a pod label in the API is dropped: the pod is created and times out like the control', async () => {
  const sneaky = await scene().addPod({ name: 'sneaky', namespace: EVIL, labels: { app: 'client', 'io.tendril.k8s.namespace.labels.team': 'trusted' } });
  await waitAllRealized(scene().node);
  assert.ok(!((await scene().endpoint(sneaky)) as Endpoint).labels.some((l) => l.includes('team=trusted')));
  assert.equal(await verdict(sneaky), 'timed out');
});
