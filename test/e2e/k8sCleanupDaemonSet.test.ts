// deploy/kubernetes/cleanup/tendril-cleanup.yaml's cleanup container, its
// script run as the manifest has it on a node namespace that an eBPF agent
// with a pod has used: each of the container's mounts becomes the same host
// path under a test root (bpffs: a test root of its own), the image's
// /opt/tendril the checkout. While the agent runs, the script fails and the
// agent's state stays; once it has stopped, the CNI network, the plugin, the
// devices, the pod's host interface, the pins and the state are gone.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, copyFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { AgentClient } from '../../src/client/agentClient.js';
import { AGENT_BIN, CNI_BIN, podHostLinks } from '../support/agentHarness.js';
import { linkExists, NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { run, toolEnv } from '../support/run.js';
import { TENDRIL_BIN } from '../support/tendrilBin.js';

requireRoot('the cleanup DaemonSet test');

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const MANIFEST = join(ROOT, 'deploy/kubernetes/cleanup/tendril-cleanup.yaml');

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** The cleanup container's script, with each mount's container path replaced by where that host path is in the test. */
function cleanupScript(hostRoot: string, bpffsRoot: string): string {
  const ds = parseAllDocuments(readFileSync(MANIFEST, 'utf8')).map((d) => d.toJS() as Obj).find((d) => d.kind === 'DaemonSet')!;
  const pod = ds.spec.template.spec as Obj;
  const hostPaths = new Map<string, string>((pod.volumes as Obj[]).map((v) => [v.name as string, v.hostPath.path as string]));
  const init = (pod.initContainers as Obj[])[0]!;
  let script = String((init.command as string[]).at(-1));
  const mounts = (init.volumeMounts as Obj[]).map((m) => ({ path: m.mountPath as string, host: hostPaths.get(m.name as string)! })).sort((a, b) => b.path.length - a.path.length);
  const placeholders = mounts.map((m, i) => ({ token: `@@MOUNT${i}@@`, to: m.host === '/sys/fs/bpf' ? bpffsRoot : join(hostRoot, m.host), from: m.path }));
  for (const p of placeholders) script = script.replace(new RegExp(`${p.from.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?=[/\\s]|$)`, 'gm'), p.token);
  for (const p of placeholders) script = script.replaceAll(p.token, p.to);
  // The image's tree is the checkout.
  return script.replaceAll('/opt/tendril/bin/tendril-agent', AGENT_BIN);
}

const pool = new NetnsPool('cds');
const hostRoot = mkdtempSync(join(tmpdir(), 'tdl-cds-'));
const bpffsRoot = `/sys/fs/bpf/tdl-cds-${randomBytes(4).toString('hex')}`;
const stateDir = join(hostRoot, 'var/run/tendril');
const libDir = join(hostRoot, 'var/lib/tendril');
const netconfDir = join(hostRoot, 'etc/cni/net.d');
const pluginDir = join(hostRoot, 'opt/cni/bin');
let agentProc: ChildProcess | undefined;
let agentLog = '';

after(async () => {
  if (agentProc && agentProc.exitCode === null && agentProc.signalCode === null) {
    const exited = new Promise((r) => agentProc!.once('exit', r));
    agentProc.kill('SIGKILL');
    await exited;
  }
  await pool.cleanup();
  rmSync(bpffsRoot, { recursive: true, force: true });
  rmSync(hostRoot, { recursive: true, force: true });
});

async function startAgent(node: string): Promise<void> {
  agentProc = spawn('nsenter', [`--net=/var/run/netns/${node}`, '--', AGENT_BIN, '--node-name', 'tdl-cds', '--pod-cidr', '10.253.0.0/24', '--state-dir', stateDir, '--lib-dir', libDir, '--bpffs-root', bpffsRoot], { stdio: ['ignore', 'pipe', 'pipe'] });
  agentProc.stdout!.on('data', (c: Buffer) => (agentLog += c.toString()));
  agentProc.stderr!.on('data', (c: Buffer) => (agentLog += c.toString()));
  const client = new AgentClient({ socketPath: join(stateDir, 'tendril.sock'), timeoutMs: 5000 });
  const deadline = Date.now() + 45_000;
  for (;;) {
    if (agentProc.exitCode !== null) assert.fail(`agent exited:\n${agentLog}`);
    if ((await client.health().catch(() => undefined))?.status === 'ok') return;
    if (Date.now() > deadline) assert.fail(`agent not ready:\n${agentLog}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("the cleanup DaemonSet's script refuses beside a running agent, then takes tendril off the node", async () => {
  const node = (await pool.add('node')).name;
  const conflist = join(netconfDir, '05-tendril.conflist');
  /** What the agent DaemonSet's init container installs: the plugin and the network. */
  const installCni = () => {
    mkdirSync(netconfDir, { recursive: true });
    mkdirSync(pluginDir, { recursive: true });
    copyFileSync(CNI_BIN, join(pluginDir, 'tendril-cni'));
    chmodSync(join(pluginDir, 'tendril-cni'), 0o755);
    writeFileSync(conflist, JSON.stringify({ cniVersion: '1.0.0', name: 'tendril', plugins: [{ type: 'tendril-cni', socket: join(stateDir, 'tendril.sock') }] }));
  };
  installCni();
  await startAgent(node);
  const pod = await pool.add('pod');
  const env = { ...toolEnv(), NETCONFPATH: netconfDir, CNI_PATH: pluginDir };
  const add = await run(['nsenter', `--net=/var/run/netns/${node}`, '--', TENDRIL_BIN, 'cni', 'add', 'tendril', pod.path, '--cache-dir', join(hostRoot, 'cni-cache')], { env });
  assert.equal(add.code, 0, add.stderr);
  const hostIfs = await podHostLinks(pool, node);
  assert.equal(hostIfs.length, 1);
  assert.ok(await linkExists(pool, node, 'tendril_host'));
  const script = cleanupScript(hostRoot, bpffsRoot);
  assert.ok(script.includes(`--state-dir ${stateDir}`) && script.includes(`--lib-dir ${libDir}`) && script.includes(`--bpffs-root ${bpffsRoot}`), script);

  // Beside a running agent: the script fails (the pod would retry) and the agent's state stays.
  const refused = await run(['nsenter', `--net=/var/run/netns/${node}`, '--', 'sh', '-ec', script]);
  assert.notEqual(refused.code, 0, `refused beside a running agent:\n${refused.stdout}${refused.stderr}`);
  assert.match(refused.stderr, /stop it first/, refused.stderr);
  assert.ok(existsSync(join(stateDir, 'tendril.sock')), 'the running agent keeps its socket');
  assert.ok(existsSync(join(bpffsRoot, 'tendril')), 'and its pins');
  assert.ok(await linkExists(pool, node, 'tendril_host'));
  assert.ok(!existsSync(conflist), 'the CNI network went first: the kubelet starts no pod on it');

  // The agent stopped (kubectl delete -f tendril.yaml): the script takes everything off.
  agentProc!.kill('SIGTERM');
  await new Promise((r) => agentProc!.once('exit', r));
  installCni();
  const done = await run(['nsenter', `--net=/var/run/netns/${node}`, '--', 'sh', '-ec', script]);
  assert.equal(done.code, 0, `${done.stdout}${done.stderr}`);
  assert.ok(!existsSync(conflist), 'the CNI network is gone');
  assert.ok(!existsSync(join(pluginDir, 'tendril-cni')), 'the plugin is gone');
  assert.ok(!(await linkExists(pool, node, 'tendril_host')), 'tendril_host is gone');
  assert.deepEqual(await podHostLinks(pool, node), [], "the pod's host interface is gone");
  assert.ok(!existsSync(join(bpffsRoot, 'tendril')), 'the pins are gone');
  assert.ok(!existsSync(stateDir) && !existsSync(libDir), 'the state and lib dirs are gone');
  const nft = await pool.exec(node, ['nft', 'list', 'tables']);
  assert.ok(!nft.stdout.includes('tendril'), nft.stdout);
});
