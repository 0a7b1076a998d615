// tendril-cni under real runtimes that drive plugins through Go's libcni:
// podman 4 with its CNI backend, and containerd 1.6's `ctr run --cni`. The
// agent and both runtimes run in a "node" namespace, each runtime with private
// config, storage and CNI dirs (nothing under /etc is read or written);
// containers are busybox rootfs built offline from busybox-static. A recording
// shim in front of tendril-cni keeps what the runtime sent and what tendril
// answered, call by call.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { AgentProcess, CNI_BIN } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { CleanupStack } from '../support/cleanupStack.js';
import { requireRoot } from '../support/root.js';
import { run, runOk } from '../support/run.js';
import { BUSYBOX_PAGE } from '../support/runtimes/busybox.js';
import { describeCall, installRecordingPlugin, readRecordedCalls, type RecordedCall } from '../support/runtimes/cniRecorder.js';
import { Containerd, type ForegroundRun } from '../support/runtimes/containerd.js';
import { Podman } from '../support/runtimes/podman.js';
import { makeScratchDir } from '../support/skelFixture.js';
import { REFERENCE_PLUGIN_DIR, TENDRIL_BIN } from '../support/tendrilBin.js';

requireRoot('the real-runtimes end-to-end test');

const POD_CIDR = '10.247.0.0/24';
const GATEWAY = '10.247.0.1';
const NET = 'tdlpodman';
const HOST_PORT = 18080;
const ALL_VERSIONS = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'];
const LIBCNI_CACHE = '/var/lib/cni/results';

const pool = new NetnsPool('rr');
let node = '';
let agent: AgentProcess;
let podman: Podman;
let callLog = '';
let scratchDir = '';
const cleanups = new CleanupStack();

interface PodmanNetwork {
  IPAddress: string;
  IPPrefixLen: number;
  Gateway: string;
}
interface PodmanInspect {
  Id: string;
  Name: string;
  NetworkSettings: { SandboxKey: string; Networks: Record<string, PodmanNetwork> };
}
interface Container {
  name: string;
  id: string;
  ip: string;
  sandbox: string;
}

function inCidr(ip: string): boolean {
  return /^10\.247\.0\.(\d+)$/.test(ip) && ip !== GATEWAY;
}

async function calls(command?: string, containerId?: string): Promise<RecordedCall[]> {
  return (await readRecordedCalls(callLog)).filter((c) => (!command || c.command === command) && (!containerId || c.env.CNI_CONTAINERID === containerId));
}

async function endpoints(): Promise<Endpoint[]> {
  return (await agent.client.listEndpoints()) as Endpoint[];
}

async function podAllocations(): Promise<Array<{ ip: string; owner: string }>> {
  return (await agent.client.listIpam()).allocations.filter((a) => !a.owner.startsWith('tendril:router'));
}

async function nodeLxcLinks(): Promise<string[]> {
  const r = await pool.exec(node, ['ip', '-j', 'link', 'show']);
  return (JSON.parse(r.stdout) as Array<{ ifname: string }>).map((l) => l.ifname).filter((n) => n.startsWith('lxc'));
}

async function nodeLxcRoutes(): Promise<string[]> {
  const r = await pool.exec(node, ['ip', '-j', '-4', 'route', 'show']);
  return (JSON.parse(r.stdout) as Array<{ dst: string; dev?: string }>).filter((x) => x.dev?.startsWith('lxc')).map((x) => x.dst);
}

async function waitFor(what: string, cond: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function startContainer(name: string, runArgs: string[], command: string[]): Promise<Container> {
  const id = await podman.runBusybox(name, ['--network', NET, ...runArgs], command);
  const info = await podman.inspect<PodmanInspect>(name);
  const net = info.NetworkSettings.Networks[NET];
  assert.ok(net, `podman attached ${name} to ${NET}: ${JSON.stringify(info.NetworkSettings)}`);
  assert.equal(info.Id, id);
  return { name, id, ip: net.IPAddress, sandbox: info.NetworkSettings.SandboxKey };
}

/**
 * podman exec, with the output written to a file in the container and read
 * back (busybox wget -O- through exec prints nothing). No `wget -T`: busybox
 * 1.35-static's wget segfaults with it.
 */
async function fetchFrom(c: Container, url: string): Promise<string> {
  await podman.podmanOk(['exec', c.name, 'wget', '-q', '-O', '/tmp/tdl-fetch', url], 15_000);
  return podman.podmanOk(['exec', c.name, 'cat', '/tmp/tdl-fetch']);
}

before(async () => {
  await Podman.requireInstalled();
  await Containerd.requireInstalled();
  node = (await pool.add('node')).name;
  agent = await AgentProcess.create({ nodeNetns: node, nodeName: 'tdl-node-rr', args: ['--pod-cidr', POD_CIDR] });
  cleanups.push('agent', () => agent.cleanup());
  const scratch = await makeScratchDir();
  cleanups.push('scratch dir', scratch.cleanup);
  scratchDir = scratch.dir;
  const binDir = join(scratch.dir, 'bin');
  await mkdir(binDir);
  callLog = join(scratch.dir, 'calls');
  await installRecordingPlugin(binDir, 'tendril-cni', CNI_BIN, callLog);
  podman = await Podman.create({ nodeNetns: node, pluginDirs: [binDir, REFERENCE_PLUGIN_DIR] });
  // Runs first: podman's DELs still need the agent and the plugin shim.
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
  await agent.start();
});

// The namespaces go last, after everything that ran in them.
cleanups.push('namespaces', () => pool.cleanup());
after(() => cleanups.run());

describe('podman (CNI backend, Go libcni) drives tendril-cni', () => {
  let web: Container;
  let client: Container;

  test('podman sees the network from the private config dir', async () => {
    const names = (await podman.podmanOk(['network', 'ls', '--format', '{{.Name}}'])).split('\n');
    assert.ok(names.includes(NET), `podman network ls: ${names.join(', ')}`);
  });

  test('two containers get their addresses from the agent, named by CNI_ARGS K8S_POD_NAME', async () => {
    web = await startContainer('tdl-rr-web', ['-p', `${HOST_PORT}:8080`], ['httpd', '-f', '-p', '8080', '-h', '/www']);
    client = await startContainer('tdl-rr-client', [], ['sleep', '600']);
    assert.ok(inCidr(web.ip) && inCidr(client.ip), `addresses in ${POD_CIDR}: ${web.ip}, ${client.ip}`);
    assert.notEqual(web.ip, client.ip);

    const eps = await endpoints();
    assert.equal(eps.length, 2, JSON.stringify(eps));
    const allocs = await podAllocations();
    for (const c of [web, client]) {
      const ep = eps.find((e) => e.containerId === c.id);
      assert.ok(ep, `endpoint for ${c.name} (${c.id}) in ${JSON.stringify(eps)}`);
      assert.equal(ep.podName, c.name);
      assert.equal(ep.state, 'ready');
      assert.equal(ep.ifName, 'eth0');
      assert.equal(ep.netns, c.sandbox);
      assert.deepEqual(
        ep.addresses.map((a) => a.ip),
        [c.ip],
      );
      assert.equal(ep.addresses[0]!.gateway, GATEWAY);
      assert.deepEqual(
        allocs.filter((a) => a.ip === c.ip).map((a) => a.owner),
        [c.id],
        `the allocation of ${c.ip} belongs to ${c.id}`,
      );

      // What podman sent and what tendril answered.
      const adds = await calls('ADD', c.id);
      assert.equal(adds.length, 1, adds.map(describeCall).join('\n'));
      const add = adds[0]!;
      assert.equal(add.code, 0, describeCall(add));
      const args = (add.env.CNI_ARGS ?? '').split(';');
      assert.ok(args.includes(`K8S_POD_NAME=${c.name}`) && args.includes('IgnoreUnknown=1'), describeCall(add));
      assert.equal(add.env.CNI_IFNAME, 'eth0');
      assert.equal(add.env.CNI_NETNS, c.sandbox);
      const result = JSON.parse(add.stdout) as {
        cniVersion: string;
        interfaces: Array<{ name: string; sandbox?: string }>;
        ips: Array<{ address: string; gateway: string; interface: number }>;
      };
      assert.equal(result.cniVersion, '1.0.0', describeCall(add));
      assert.equal(result.ips[0]!.address, `${c.ip}/32`);
      assert.equal(result.ips[0]!.gateway, GATEWAY);
      const podIf = result.interfaces[result.ips[0]!.interface]!;
      assert.equal(podIf.name, 'eth0');
      assert.equal(podIf.sandbox, c.sandbox);
    }

    const cli = JSON.parse(await runOk([TENDRIL_BIN, 'endpoint', 'list', '-o', 'json', '--socket', agent.socket])) as Endpoint[];
    assert.deepEqual(cli.map((e) => e.podName).sort(), [client.name, web.name].sort());
  });

  test('one container reaches the other, and the node reaches the web container through portmap', async () => {
    await podman.podmanOk(['exec', client.name, 'ping', '-c', '1', '-W', '3', web.ip]);
    assert.equal(await fetchFrom(client, `http://${web.ip}:8080/index.html`), BUSYBOX_PAGE);
    await podman.podmanOk(['exec', client.name, 'ping', '-c', '1', '-W', '3', GATEWAY]);
    // portmap, chained after tendril-cni, got tendril's result as prevResult and the runtime's portMappings.
    const viaPort = await run(['nsenter', `--net=/var/run/netns/${node}`, '--', 'busybox', 'wget', '-q', '-O', '-', `http://${GATEWAY}:${HOST_PORT}/index.html`], { timeoutMs: 15_000 });
    assert.equal(viaPort.stdout, BUSYBOX_PAGE, viaPort.stderr);
  });

  test('every VERSION call podman made was answered with the supported versions', async () => {
    const versions = await calls('VERSION');
    assert.ok(versions.length > 0, 'podman (libcni) asked tendril-cni for its versions');
    for (const v of versions) {
      assert.equal(v.code, 0, describeCall(v));
      const asked = (JSON.parse(v.stdin) as { cniVersion: string }).cniVersion;
      const info = JSON.parse(v.stdout) as { cniVersion: string; supportedVersions: string[] };
      for (const want of [...ALL_VERSIONS, asked]) assert.ok(info.supportedVersions.includes(want), `${want} missing: ${describeCall(v)}`);
    }
  });

  test("VERSION answers carry the input's cniVersion", async () => {
    // The CNI specification's SPEC.md 1.1.0 ("VERSION Success" and section 5 "Version"; 1.0.0 alike): plugins
    // must output `cniVersion`, "the value of `cniVersion` specified on input".
    // libcni ignores the field, so podman works either way; the spec is still the spec.
    for (const v of await calls('VERSION')) {
      const asked = (JSON.parse(v.stdin) as { cniVersion: string }).cniVersion;
      const info = JSON.parse(v.stdout) as { cniVersion: string };
      assert.equal(info.cniVersion, asked, `VERSION must echo the input's cniVersion ${asked}: ${describeCall(v)}`);
    }
  });

  test("a container that exits is torn down by conmon's `podman container cleanup`, socket from the netconf", async () => {
    const shortLived = await startContainer('tdl-rr-short', [], ['sleep', '2']);
    assert.ok(inCidr(shortLived.ip));
    assert.ok((await endpoints()).some((e) => e.containerId === shortLived.id));
    await waitFor(`the endpoint of ${shortLived.name} to go`, async () => !(await endpoints()).some((e) => e.containerId === shortLived.id), 30_000);
    // The recording wrapper logs a call once tendril-cni has exited: a moment after the agent removed the endpoint.
    await waitFor(`podman's DEL of ${shortLived.name} in the call log`, async () => (await calls('DEL', shortLived.id)).length >= 1, 5_000);

    const dels = await calls('DEL', shortLived.id);
    assert.ok(dels.length >= 1, 'podman ran DEL');
    for (const d of dels) {
      assert.equal(d.code, 0, describeCall(d));
      assert.equal(d.stdout, '', `DEL prints nothing on success: ${describeCall(d)}`);
    }
    // The DEL came from the cleanup process conmon starts, whose environment
    // has neither our storage config nor any tendril variable.
    assert.equal(dels[0]!.env.CONTAINERS_STORAGE_CONF, undefined, `DEL ran in podman's minimal cleanup environment: ${JSON.stringify(dels[0]!.env)}`);
    assert.equal(dels[0]!.env.TENDRIL_SOCK, undefined);
    assert.equal((JSON.parse(dels[0]!.stdin) as { socket?: string }).socket, agent.socket);

    assert.ok(!(await podAllocations()).some((a) => a.ip === shortLived.ip), `${shortLived.ip} released`);
    assert.ok(!(await nodeLxcRoutes()).includes(shortLived.ip), 'host route removed');
    assert.equal((await nodeLxcLinks()).length, 2, 'only the two running containers keep an lxc device');
    await podman.podmanOk(['rm', shortLived.name]);
  });

  test('`podman rm -f` runs DEL: endpoints, addresses, devices, routes and port mappings are gone', async () => {
    await podman.podmanOk(['rm', '-f', '-t', '0', web.name, client.name]);
    assert.deepEqual(await endpoints(), []);
    assert.deepEqual(await podAllocations(), []);
    assert.deepEqual(await nodeLxcLinks(), []);
    assert.deepEqual(await nodeLxcRoutes(), []);
    const nat = await pool.exec(node, ['iptables-save', '-t', 'nat']);
    assert.ok(!nat.stdout.includes(`--dport ${HOST_PORT}`), `portmap rules left:\n${nat.stdout}`);
    for (const c of [web, client]) {
      const dels = await calls('DEL', c.id);
      assert.ok(dels.length >= 1, `DEL for ${c.name}`);
      for (const d of dels) {
        assert.equal(d.code, 0, describeCall(d));
        assert.equal(d.stdout, '', `DEL prints nothing on success: ${describeCall(d)}`);
      }
      assert.equal(existsSync(c.sandbox), false, `podman removed ${c.sandbox}`);
      // libcni drops its cached result only after every plugin's DEL succeeded.
      assert.equal(existsSync(join(LIBCNI_CACHE, `${NET}-${c.id}-eth0`)), false);
    }
  });

  test('no call podman made to tendril-cni failed', async (t) => {
    const all = await calls();
    const counts = new Map<string, number>();
    for (const c of all) counts.set(c.command, (counts.get(c.command) ?? 0) + 1);
    t.diagnostic(`podman's calls to tendril-cni: ${[...counts].map(([k, n]) => `${k} ×${n}`).join(', ')}`);
    const failed = all.filter((c) => c.code !== 0);
    assert.deepEqual(failed.map(describeCall), []);
  });
});

describe('containerd 1.6 `ctr run --cni` (go-cni, Go libcni) drives tendril-cni', () => {
  const CTR_NET = 'tdlctr';
  let containerd: Containerd;
  let ctrLog = '';
  let web: ForegroundRun;
  let webEp: Endpoint;
  let clientEp: Endpoint | undefined;

  async function ctrCalls(command: string, containerId: string): Promise<RecordedCall[]> {
    return (await readRecordedCalls(ctrLog)).filter((c) => c.command === command && c.env.CNI_CONTAINERID === containerId);
  }

  async function endpointOf(containerId: string): Promise<Endpoint | undefined> {
    return (await endpoints()).find((e) => e.containerId === containerId);
  }

  async function waitForEndpoint(r: ForegroundRun, containerId: string): Promise<Endpoint> {
    let exited = false;
    void r.done.then(() => (exited = true));
    let ep: Endpoint | undefined;
    await waitFor(
      `the endpoint of ${containerId}`,
      async () => {
        if (exited) throw new Error(`ctr run ${r.name} exited early: ${JSON.stringify(await r.done)}`);
        // The endpoint is listed from its creation on; ADD answers only once it is ready.
        if ((await ctrCalls('ADD', containerId)).length === 0) return false;
        ep = await endpointOf(containerId);
        return ep !== undefined;
      },
      20_000,
    );
    return ep!;
  }

  before(async () => {
    // ctr reads the first file of /etc/cni/net.d and searches /opt/cni/bin:/usr/lib/cni;
    // the daemon's private mount namespace shows it these dirs there instead.
    const confDir = join(scratchDir, 'ctr-net.d');
    const binDir = join(scratchDir, 'ctr-bin');
    await mkdir(confDir);
    await mkdir(binDir);
    ctrLog = join(scratchDir, 'ctr-calls');
    await installRecordingPlugin(binDir, 'tendril-cni', CNI_BIN, ctrLog);
    await writeFile(join(confDir, '10-tdlctr.conflist'), JSON.stringify({ cniVersion: '1.0.0', name: CTR_NET, plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
    containerd = await Containerd.create({ nodeNetns: node, cniConfDir: confDir, cniBinDir: binDir });
    // Runs before the agent's and the scratch dir's cleanup: ctr's DELs need both.
    cleanups.push('containerd', async () => {
      const problems = await containerd.cleanup();
      if (problems.length > 0) throw new Error(problems.join('; '));
    });
    await containerd.start();
  });

  test('two containers get addresses from the agent and talk; the one that exits is deleted with CNI_NETNS empty', async () => {
    const webId = Containerd.cniContainerId('tdl-ctr-web');
    const clientId = Containerd.cniContainerId('tdl-ctr-client');
    web = await containerd.runForeground('tdl-ctr-web', ['httpd', '-f', '-p', '8080', '-h', '/www']);
    webEp = await waitForEndpoint(web, webId);
    const webIp = webEp.addresses[0]!.ip;
    assert.ok(inCidr(webIp), webIp);
    assert.equal(webEp.state, 'ready');
    assert.match(webEp.netns, /^\/proc\/\d+\/ns\/net$/);

    const add = (await ctrCalls('ADD', webId))[0];
    assert.ok(add, 'ctr ran ADD');
    assert.equal(add.code, 0, describeCall(add));
    const result = JSON.parse(add.stdout) as { cniVersion: string; ips: Array<{ address: string; gateway: string }> };
    assert.equal(result.cniVersion, '1.0.0');
    assert.deepEqual(result.ips.map((i) => [i.address, i.gateway]), [[`${webIp}/32`, GATEWAY]]);

    const client = await containerd.runForeground('tdl-ctr-client', [
      'sh',
      '-c',
      `ip -4 -o addr show dev eth0; ping -c 1 -W 3 ${webIp} && wget -q -O - http://${webIp}:8080/index.html`,
    ]);
    const out = await client.done;
    assert.equal(out.code, 0, `ctr run: ${out.stdout}\n${out.stderr}`);
    assert.ok(out.stdout.includes(BUSYBOX_PAGE), out.stdout);
    const clientIp = /inet (10\.247\.0\.\d+)\/32/.exec(out.stdout)?.[1];
    assert.ok(clientIp && inCidr(clientIp) && clientIp !== webIp, out.stdout);

    // ctr ran DEL after the task exited: no netns any more, prevResult from libcni's cache.
    const dels = await ctrCalls('DEL', clientId);
    assert.equal(dels.length, 1, dels.map(describeCall).join('\n'));
    const del = dels[0]!;
    assert.equal(del.code, 0, describeCall(del));
    assert.equal(del.stdout, '', describeCall(del));
    assert.equal(del.env.CNI_NETNS, '', 'ctr sends DEL with an empty CNI_NETNS');
    assert.ok((JSON.parse(del.stdin) as { prevResult?: unknown }).prevResult, 'DEL carried prevResult');
    clientEp = await endpointOf(clientId);
    assert.equal(clientEp, undefined, 'the client endpoint is gone');
    assert.ok(!(await podAllocations()).some((a) => a.ip === clientIp), `${clientIp} released`);
    assert.ok(!(await nodeLxcRoutes()).includes(clientIp), 'host route removed');
  });

  test('killing the task: ctr runs DEL and the endpoint, address, device and route are gone', async () => {
    const webId = Containerd.cniContainerId('tdl-ctr-web');
    const kill = await containerd.ctr(['task', 'kill', '-s', 'SIGKILL', web.name]);
    assert.equal(kill.code, 0, kill.stderr);
    await web.done;
    assert.equal(await endpointOf(webId), undefined);
    const webIp = webEp.addresses[0]!.ip;
    assert.ok(!(await podAllocations()).some((a) => a.ip === webIp), `${webIp} released`);
    assert.ok(!(await nodeLxcLinks()).includes(webEp.hostIfName), `${webEp.hostIfName} removed`);
    assert.ok(!(await nodeLxcRoutes()).includes(webIp), 'host route removed');
    const dels = await ctrCalls('DEL', webId);
    assert.equal(dels.length, 1);
    assert.equal(dels[0]!.code, 0, describeCall(dels[0]!));
    assert.equal((await containerd.ctr(['containers', 'list', '-q'])).stdout.trim(), '', 'ctr --rm removed both containers');
  });

  test('no call ctr made to tendril-cni failed', async (t) => {
    const all = await readRecordedCalls(ctrLog);
    t.diagnostic(`ctr's calls to tendril-cni: ${all.map((c) => c.command).join(', ')}`);
    assert.deepEqual(all.filter((c) => c.code !== 0).map(describeCall), []);
  });
});
