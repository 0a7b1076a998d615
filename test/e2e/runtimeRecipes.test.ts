// The README's podman and containerd recipes, command by command, with the
// real runtimes: a private containers.conf naming tendril's plugin and
// network dirs, podman run under `nsenter --net`, labels through podman's
// CNI_ARGS environment, and `tendril endpoint labels` by container ID for
// what a runtime cannot label (ctr passes no CNI_ARGS at all).
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { AgentProcess, CNI_BIN } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { CleanupStack } from '../support/cleanupStack.js';
import { requireRoot } from '../support/root.js';
import { run, runOk } from '../support/run.js';
import { Containerd, type ForegroundRun } from '../support/runtimes/containerd.js';
import { Podman } from '../support/runtimes/podman.js';
import { makeScratchDir } from '../support/skelFixture.js';
import { REFERENCE_PLUGIN_DIR, TENDRIL_BIN } from '../support/tendrilBin.js';

requireRoot('the podman and containerd recipe test');

const NET = 'tendril';
const pool = new NetnsPool('rcp');
let node = '';
let agent: AgentProcess;
let scratchDir = '';
const cleanups = new CleanupStack();

async function tendril(args: readonly string[]): Promise<string> {
  return runOk([TENDRIL_BIN, ...args, '--socket', agent.socket]);
}

async function endpointOf(containerId: string): Promise<Endpoint | undefined> {
  return ((await agent.client.listEndpoints()) as Endpoint[]).find((e) => e.containerId === containerId);
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

before(async () => {
  await Podman.requireInstalled();
  await Containerd.requireInstalled();
  node = (await pool.add('node')).name;
  agent = await AgentProcess.create({ nodeNetns: node, nodeName: 'tdl-node-rcp', args: ['--pod-cidr', '10.246.0.0/24'] });
  cleanups.push('agent', () => agent.cleanup());
  const scratch = await makeScratchDir();
  cleanups.push('scratch dir', scratch.cleanup);
  scratchDir = scratch.dir;
  await agent.start();
});

// The namespaces go last, after everything that ran in them.
cleanups.push('namespaces', () => pool.cleanup());
after(() => cleanups.run());

describe('the podman recipe', () => {
  let podman: Podman;

  before(async () => {
    // Recipe: containers.conf [network] cni_plugin_dirs = [<tendril's bin>, <reference plugins>], network_config_dir = <dir>.
    const binDir = join(scratchDir, 'podman-bin');
    await mkdir(binDir);
    await runOk(['cp', CNI_BIN, join(binDir, 'tendril-cni')]);
    podman = await Podman.create({ nodeNetns: node, pluginDirs: [binDir, REFERENCE_PLUGIN_DIR] });
    cleanups.push('podman', async () => {
      const problems = await podman.cleanup();
      if (problems.length > 0) throw new Error(problems.join('; '));
    });
    await podman.writeConflist(NET, {
      cniVersion: '1.0.0',
      name: NET,
      plugins: [
        { type: 'tendril-cni', socket: agent.socket },
        { type: 'portmap', capabilities: { portMappings: true } },
      ],
    });
  });

  test('CNI_ARGS=TENDRIL_LABELS=app=web in podman run\'s environment labels the container (container: source)', async () => {
    const id = await podman.runBusybox('tdl-rcp-web', ['--network', NET], ['sleep', '600'], { CNI_ARGS: 'TENDRIL_LABELS=app=web,tier=front' });
    const ep = await endpointOf(id);
    assert.ok(ep, `an endpoint for ${id}`);
    assert.deepEqual([...ep.labels].sort(), ['container:app=web', 'container:tier=front']);
    assert.equal(ep.podName, 'tdl-rcp-web', 'podman passes the container name as K8S_POD_NAME');
    const shown = await tendril(['endpoint', 'get', `container-id:${id}`]);
    assert.match(shown, /container:app=web/);
  });

  test('a container started without labels is labelled afterwards by its container ID', async () => {
    const id = await podman.runBusybox('tdl-rcp-client', ['--network', NET], ['sleep', '600']);
    const before = await endpointOf(id);
    assert.ok(before, `an endpoint for ${id}`);
    assert.deepEqual(before.labels, []);
    const out = await tendril(['endpoint', 'labels', `container-id:${id}`, '--add', 'app=client']);
    assert.match(out, /^added container:app=client \(no source given: container:, as the endpoint has no pod namespace/m);
    const ep = await endpointOf(id);
    assert.deepEqual(ep?.labels, ['container:app=client']);
    assert.notEqual(ep?.identity, before.identity, 'a new identity follows the labels');
  });

  test('packets and the trace agree: a NetworkPolicy selects no container: label, a tendril policy does', async () => {
    const web = (await endpointOf((await podman.inspect<{ Id: string }>('tdl-rcp-web')).Id))!;
    const webIp = web.addresses[0]!.ip;
    const ping = () => podman.podman(['exec', 'tdl-rcp-client', 'ping', '-c', '1', '-W', '2', webIp], 15_000);
    const trace = () => run([TENDRIL_BIN, 'policy', 'trace', '--src', 'app=client', '--dst', 'app=web,tier=front', '--dport', 'icmp', '--socket', agent.socket]);
    const policyFile = join(scratchDir, 'web-from-nobody.yaml');

    // A NetworkPolicy selects k8s: labels of its namespace: the import says it selects nothing, and nothing is enforced.
    await writeFile(policyFile, 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: { name: web, namespace: default }\nspec:\n  podSelector: { matchLabels: { app: web } }\n  ingress: [ { from: [ { podSelector: { matchLabels: { app: nobody } } } ] } ]\n');
    const imported = await tendril(['policy', 'import', policyFile]);
    assert.match(imported, /Warning: NetworkPolicy\/default\/web selects no endpoint/);
    assert.equal((await ping()).code, 0, 'the container is not selected: ping passes');
    const allowed = await trace();
    assert.match(allowed.stdout, /destination labels: container:app=web container:tier=front\n/);
    assert.equal(allowed.code, 0, `the trace agrees with the packets:\n${allowed.stdout}`);
    await tendril(['policy', 'delete', '--all']);

    // A namespaced CiliumNetworkPolicy selects only its namespace's pods: it too selects nothing, and says so.
    await writeFile(policyFile, 'apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: { name: web, namespace: default }\nspec:\n  endpointSelector: { matchLabels: { app: web } }\n  ingress: [ { fromEndpoints: [ { matchLabels: { app: nobody } } ] } ]\n');
    assert.match(await tendril(['policy', 'import', policyFile]), /Warning: TendrilNetworkPolicy\/default\/web selects no endpoint \(selector labels\(any:app=web,k8s:io\.kubernetes\.pod\.namespace=default\)\)/);
    await tendril(['policy', 'delete', '--all']);

    // A cluster-wide policy's selector without a source matches any source: the container is selected and the ping dropped.
    await writeFile(policyFile, 'apiVersion: cilium.io/v2\nkind: CiliumClusterwideNetworkPolicy\nmetadata: { name: web }\nspec:\n  endpointSelector: { matchLabels: { app: web } }\n  ingress: [ { fromEndpoints: [ { matchLabels: { app: nobody } } ] } ]\n');
    assert.doesNotMatch(await tendril(['policy', 'import', policyFile]), /selects no endpoint/);
    assert.notEqual((await ping()).code, 0, 'the tendril policy drops the ping');
    const denied = await trace();
    assert.equal(denied.code, 1, `the trace agrees with the packets:\n${denied.stdout}`);
    assert.match(denied.stdout, /Final verdict: DENY/);
    await tendril(['policy', 'delete', '--all']);
  });
});

describe('the containerd recipe (ctr run --cni)', () => {
  let containerd: Containerd;
  let web: ForegroundRun | undefined;

  before(async () => {
    // Recipe: the conflist first in /etc/cni/net.d, tendril-cni in /opt/cni/bin (here: the test's dirs, bind-mounted there for ctr only).
    const confDir = join(scratchDir, 'ctr-net.d');
    const binDir = join(scratchDir, 'ctr-bin');
    await mkdir(confDir);
    await mkdir(binDir);
    await runOk(['cp', CNI_BIN, join(binDir, 'tendril-cni')]);
    await writeFile(
      join(confDir, '10-tendril.conflist'),
      JSON.stringify({ cniVersion: '1.0.0', name: NET, plugins: [{ type: 'tendril-cni', socket: agent.socket, args: { tendril: { labels: ['runtime=ctr'] } } }] }),
    );
    containerd = await Containerd.create({ nodeNetns: node, cniConfDir: confDir, cniBinDir: binDir });
    cleanups.push('containerd', async () => {
      const problems = await containerd.cleanup();
      if (problems.length > 0) throw new Error(problems.join('; '));
    });
    await containerd.start();
  });

  test('the netconf labels every ctr container; `endpoint labels container-id:<namespace>-<name>` adds its own', async () => {
    web = await containerd.runForeground('tdl-rcp-ctr', ['sleep', '600']);
    const cniId = Containerd.cniContainerId('tdl-rcp-ctr');
    const ep = await waitFor(`the endpoint of ${cniId}`, () => endpointOf(cniId));
    assert.deepEqual(ep.labels, ['container:runtime=ctr']);
    const out = await tendril(['endpoint', 'labels', `container-id:${cniId}`, '--add', 'app=web']);
    assert.match(out, /^added container:app=web \(no source given: container:/m);
    const after = await endpointOf(cniId);
    assert.deepEqual([...(after?.labels ?? [])].sort(), ['container:app=web', 'container:runtime=ctr']);
    await containerd.ctr(['task', 'kill', '-s', 'SIGKILL', web.name]);
    await web.done;
    assert.equal(await endpointOf(cniId), undefined, 'DEL removed the endpoint');
  });
});
