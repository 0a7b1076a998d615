// One agent per node (with its socket file and log mode):
// with pods running, a second tendril-agent started in the same node
// namespace — on the first one's socket, or on a socket of its own — must
// touch nothing (links, routes, tendril_host's addresses, the masquerade
// table, its own kvstore) and exit at once with one line naming the owner.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Result100 } from '../../src/cni/index.js';
import { type CniRuntime, confListFromBytes, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import { AGENT_BIN, type AgentProcess, ping, podHostLinks, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';

requireRoot('the node ownership test');

const pool = new NetnsPool('own');
let node = '';
let agent: AgentProcess;
let runtime: CniRuntime;
let cleanup = async () => {};
let scratch = '';
const pods: Array<{ ns: string; ip: string }> = [];

const conflist = (): NetworkConfigList => confListFromBytes(JSON.stringify({ cniVersion: '1.1.0', name: 'tdlown', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
const rt = (containerId: string, netns: string): RuntimeConf => ({ containerId, netns, ifName: 'eth0', args: [['K8S_POD_NAMESPACE', 'default'], ['K8S_POD_NAME', containerId]] });

/** What a second agent could have changed in the node's namespace, in a comparable form. */
async function nodeSnapshot(): Promise<Record<string, string[]>> {
  const json = async <T>(argv: string[]): Promise<T> => {
    const r = await pool.exec(node, argv);
    assert.equal(r.code, 0, `${argv.join(' ')}: ${r.stderr}`);
    return JSON.parse(r.stdout) as T;
  };
  const links = await json<Array<{ ifindex: number; ifname: string; flags: string[] }>>(['ip', '-j', 'link', 'show']);
  const addrs = await json<Array<{ ifname: string; addr_info: Array<{ local: string; prefixlen: number }> }>>(['ip', '-j', 'addr', 'show']);
  const routes = await json<Array<{ dst: string }>>(['ip', '-j', 'route', 'show', 'table', 'all']);
  // The whole ruleset: the eBPF datapath installs no table of its own, and a second agent must not add one either.
  const nft = await pool.exec(node, ['nft', 'list', 'ruleset']);
  assert.equal(nft.code, 0, nft.stderr);
  // IPv6 link-local addresses and their routes are the kernel's, added whenever it gets round to a device coming up.
  const kernelLinkLocal = (dst: string) => /^(fe80:|ff00::\/8$)/.test(dst);
  return {
    links: links.map((l) => `${l.ifindex} ${l.ifname} ${l.flags.join(',')}`).sort(),
    addresses: addrs.flatMap((l) => l.addr_info.filter((a) => !kernelLinkLocal(a.local)).map((a) => `${l.ifname} ${a.local}/${a.prefixlen}`)).sort(),
    routes: routes.filter((r) => !kernelLinkLocal(r.dst)).map((r) => JSON.stringify(r)).sort(),
    nft: nft.stdout.split('\n'),
  };
}

/** Runs another tendril-agent in the node's namespace and waits (at most 15 s) for it to exit. */
function secondAgent(args: string[]): Promise<{ code: number | null; stderr: string; ms: number }> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn('nsenter', [`--net=/var/run/netns/${node}`, '--', AGENT_BIN, '--node-name', 'tdl-node-own2', '--pod-cidr', '10.245.0.0/24', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stderr += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr, ms: Date.now() - started });
    });
  });
}

before(async () => {
  ({ node, agent, runtime, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-own', args: ['--pod-cidr', '10.244.0.0/24'] }));
  scratch = await mkdtemp(join(tmpdir(), 'tdl-own-'));
  for (const id of ['tdl-own-a', 'tdl-own-b']) {
    const pod = await pool.add(id.slice(-1));
    const result = (await runtime.addNetworkList(conflist(), rt(id, pod.path))) as Result100;
    const ip = result.ips?.[0]?.address.split('/')[0];
    assert.ok(ip);
    pods.push({ ns: pod.name, ip });
  }
});

after(async () => {
  await cleanup();
  await pool.cleanup();
  await rm(scratch, { recursive: true, force: true });
});

async function assertFirstAgentIntact(before: Record<string, string[]>): Promise<void> {
  assert.deepEqual(await nodeSnapshot(), before, 'the node\'s links, addresses, routes and masquerade table are unchanged');
  assert.equal((await podHostLinks(pool, node)).length, 2);
  for (const p of pods) assert.ok(await ping(pool, node, p.ip), `pod ${p.ip} still answers`);
  assert.equal((await agent.client.health()).status, 'ok');
  assert.equal((await agent.client.listEndpoints()).length, 2);
}

const REFUSED_WITHIN_MS = 10_000;

describe('a second agent in the same node namespace', () => {
  test('on the first agent\'s socket: exits non-zero at once with one line, touching nothing', async () => {
    const before = await nodeSnapshot();
    const dir = join(scratch, 'same-socket');
    const r = await secondAgent(['--state-dir', dir, '--lib-dir', join(dir, 'lib'), '--socket', agent.socket]);
    assert.notEqual(r.code, 0, r.stderr);
    // At once: before any lock or timeout, so the bound is the process's own start (about a second alone, several
    // beside other tests on two cores), far below the 15 s a wait for the first agent would take.
    assert.ok(r.ms < REFUSED_WITHIN_MS, `refused in ${r.ms} ms`);
    const lines = r.stderr.trim().split('\n');
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0]!, /another agent .*owns this node.*pid \d+/);
    await assertFirstAgentIntact(before);
    await assert.rejects(stat(join(dir, 'lib')), { code: 'ENOENT' }, 'no kvstore was opened');
  });

  test('on a socket of its own: the same refusal; its socket and kvstore are never created', async () => {
    const before = await nodeSnapshot();
    const dir = join(scratch, 'own-socket');
    const r = await secondAgent(['--state-dir', dir, '--lib-dir', join(dir, 'lib')]);
    assert.notEqual(r.code, 0, r.stderr);
    assert.ok(r.ms < REFUSED_WITHIN_MS, `refused in ${r.ms} ms`);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /another agent .*owns this node.*pid \d+/);
    await assertFirstAgentIntact(before);
    await assert.rejects(stat(join(dir, 'tendril.sock')), { code: 'ENOENT' });
    await assert.rejects(stat(join(dir, 'lib')), { code: 'ENOENT' });
  });

  test('its log file is created 0600 and holds the refusal', async () => {
    const dir = join(scratch, 'logged');
    const logFile = join(dir, 'log', 'agent.log');
    const r = await secondAgent(['--state-dir', dir, '--lib-dir', join(dir, 'lib'), '--log-file', logFile]);
    assert.notEqual(r.code, 0, r.stderr);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.equal((await stat(logFile)).mode & 0o777, 0o600);
    assert.match(await readFile(logFile, 'utf8'), /owns this node/);
  });
});
