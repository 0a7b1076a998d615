// Label sources, as a user meets them: a container labelled only through
// TENDRIL_LABELS carries container: labels; a trace by those labels resolves
// them exactly as the endpoint got them; a NetworkPolicy (k8s: labels of its
// namespace) that selects no endpoint says so on import; `endpoint labels
// --add` says which source a label got. The real agent over the fake
// datapath (the packets' side is in test/e2e/runtimeRecipes.test.ts).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type FakeNodeAgent, startFakeNodeAgent } from '../agent/testing/fakeNodeAgent.js';
import { dbFromWebPolicy } from '../policy/testing/policies.js';
import { runCli } from './testing/cliProcess.js';

describe('label sources: container: outside Kubernetes, k8s: in a namespace, the same everywhere', () => {
  let node: FakeNodeAgent;
  let sock: string[];
  let webId: number;
  let dbId: number;
  let podId: number;

  before(async () => {
    node = await startFakeNodeAgent({ nodeName: 'tdl-cli-src', podCidr: '10.88.0.0/24' });
    sock = ['--socket', node.config.socket];
    const api = node.agent.api();
    const conf = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlsrc', type: 'tendril-cni' });
    // Two containers as podman or ctr networks them: TENDRIL_LABELS, no K8S_POD_NAMESPACE.
    for (const name of ['web', 'db']) {
      const netns = `/var/run/netns/tdlclisrc${name}`;
      node.datapath.addNetns(netns);
      await api.cni.handle({ command: 'ADD', containerId: `tdl-src-${name}`, netns, ifName: 'eth0', args: `K8S_POD_NAME=${name};TENDRIL_LABELS=app=${name}`, config: conf });
    }
    // And one pod of namespace default.
    node.datapath.addNetns('/var/run/netns/tdlclisrcpod');
    await api.cni.handle({ command: 'ADD', containerId: 'tdl-src-pod', netns: '/var/run/netns/tdlclisrcpod', ifName: 'eth0', args: 'K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod;TENDRIL_LABELS=app=db', config: conf });
    const eps = api.endpoints.list();
    webId = eps.find((e) => e.containerId === 'tdl-src-web')!.id;
    dbId = eps.find((e) => e.containerId === 'tdl-src-db')!.id;
    podId = eps.find((e) => e.containerId === 'tdl-src-pod')!.id;
  });
  after(() => node.stop());

  it('TENDRIL_LABELS without a pod namespace gives container: labels', () => {
    const db = node.agent.api().endpoints.lookup(String(dbId))!;
    assert.deepEqual(db.labels, ['container:app=db']);
  });

  it('trace --src app=web resolves container:app=web as the endpoint has it, names the endpoint, and allows what the datapath allows', async () => {
    // A NetworkPolicy in default selects k8s:app=db of namespace default: the pod, not the container.
    const imported = await runCli(['policy', 'import', '-', ...sock], { input: dbFromWebPolicy({ namespace: 'default', tcpPort: 5432 }) });
    assert.equal(imported.code, 0, imported.stderr);
    const r = await runCli(['policy', 'trace', '--src', 'app=web', '--dst', 'app=db', '--dport', '80/tcp', ...sock]);
    assert.match(r.stdout, /source labels: container:app=web\n/);
    assert.match(r.stdout, /destination labels: container:app=db\n/);
    assert.match(r.stdout, new RegExp(`source: the labels of endpoint ${webId}\\n`));
    assert.match(r.stdout, new RegExp(`destination: the labels of endpoint ${dbId}\\n`));
    assert.match(r.stdout, /labels without a source are container:/);
    // The endpoint's own computed policy agrees: nothing enforces its ingress.
    const byEndpoint = await runCli(['policy', 'trace', '--src-endpoint', String(webId), '--dst-endpoint', String(dbId), '--dport', '80/tcp', ...sock]);
    assert.match(byEndpoint.stdout, /Final verdict: ALLOW\n$/);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /Final verdict: ALLOW\n$/);
  });

  it('an explicit source is taken as given: k8s: with the namespace is the pod, and the pod is denied port 80', async () => {
    const r = await runCli(['policy', 'trace', '--src', 'container:app=web', '--dst', 'k8s:app=db,io.kubernetes.pod.namespace=default', '--dport', '80/tcp', ...sock]);
    assert.match(r.stdout, /destination labels: k8s:app=db k8s:io\.kubernetes\.pod\.namespace=default\n/);
    assert.match(r.stdout, new RegExp(`destination: the labels of endpoint ${podId}\\n`));
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.match(r.stdout, /Final verdict: DENY\n$/);
  });

  it('policy import says which policy selects no endpoint, with its selector (CLI and API)', async () => {
    const policy = dbFromWebPolicy({ namespace: 'shop' });
    const r = await runCli(['policy', 'import', '-', ...sock], { input: policy });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^Warning: NetworkPolicy\/shop\/db-from-web selects no endpoint \(selector labels\(k8s:app=db,k8s:io\.kubernetes\.pod\.namespace=shop\)\)$/m);
    assert.match(r.stdout, /a NetworkPolicy only their k8s: labels; a container outside Kubernetes has container: labels and no namespace: select it with a CiliumClusterwideNetworkPolicy/);
    const json = await runCli(['policy', 'import', '-', '-o', 'json', ...sock], { input: policy });
    const body = JSON.parse(json.stdout) as { selectsNoEndpoint: Array<{ policy: string; selector: string }> };
    assert.deepEqual(body.selectsNoEndpoint, [{ policy: 'NetworkPolicy/shop/db-from-web', selector: 'labels(k8s:app=db,k8s:io.kubernetes.pod.namespace=shop)' }]);
    // A tendril policy's selector without a source matches any source: it selects the containers, and says nothing.
    const tendril = await runCli(['policy', 'import', '-', '-o', 'json', ...sock], {
      input: 'apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: { name: db, namespace: default }\nspec:\n  endpointSelector: { matchLabels: { app: db } }\n  ingress: [ { fromEndpoints: [ { matchLabels: { app: web } } ] } ]\n',
    });
    assert.equal(tendril.code, 0, tendril.stderr);
    assert.deepEqual((JSON.parse(tendril.stdout) as { selectsNoEndpoint: unknown[] }).selectsNoEndpoint, []);
  });

  it('endpoint labels --add says the source a label got and how to choose another; its help says so too', async () => {
    const r = await runCli(['endpoint', 'labels', String(webId), '--add', 'tier=front', '--add', 'k8s:team=a', ...sock]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^added container:tier=front \(no source given: container:, as the endpoint has no pod namespace; write k8s:tier=front for a k8s: label\)$/m);
    assert.match(r.stdout, /^added k8s:team=a$/m);
    assert.match(r.stdout, /a NetworkPolicy matches only k8s: labels of its own namespace/);
    const pod = await runCli(['endpoint', 'labels', String(podId), '--add', 'tier=back', ...sock]);
    assert.match(pod.stdout, /^added k8s:tier=back \(no source given: k8s:, as the endpoint is a pod of namespace default; write container:tier=back for a container: label\)$/m);
    const help = await runCli(['endpoint', 'labels', '--help']);
    assert.match(help.stdout.replace(/\s+/g, ' '), /without a source it gets k8s: on a pod of a Kubernetes namespace and container: on any other container/);
  });
});
