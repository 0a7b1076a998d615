// The cluster-wide view on real traffic: two nodes whose agents serve their
// flows on their node IP (--flows-listen-addr, a bearer token) and announce it
// in the etcd node registry; `tendril relay` in the hub namespace finds them
// there; one TCP connection from a pod on node A to a pod on node B shows in
// `tendril observe --server <relay>` as both nodes' flows, merged in time
// order; a stopped node is reported unavailable; the relay refuses a missing
// or wrong token.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Flow, FlowLine } from '../../src/flow/types.js';
import { type ClusterPod, ClusterScene, POD_TCP_PORT } from '../support/clusterScene.js';
import { eventually } from '../support/datapathObserve.js';
import { requireRoot } from '../support/root.js';
import { run } from '../support/run.js';
import { TENDRIL_BIN } from '../support/tendrilBin.js';

requireRoot('the relay e2e test');

const T = { timeout: 120_000 };
const RELAY_PORT = 14245;
const NODE_TOKEN = 'tdl-node-token-4f2a';
const RELAY_TOKEN = 'tdl-relay-token-9c1e';

let scene: ClusterScene | undefined;
let dir = '';
let relay: ChildProcess | undefined;
let relayOutput = '';
let client: ClusterPod | undefined;
let server: ClusterPod | undefined;
const s = () => scene!;
const relayUrl = () => `http://${s().cluster.etcdEndpoint.replace(/^http:\/\/|:2379$/g, '')}:${RELAY_PORT}`;

/** `tendril observe` in the hub namespace against the relay. */
function observe(args: string[]) {
  return run(['nsenter', `--net=/var/run/netns/${s().cluster.hub}`, '--', TENDRIL_BIN, 'observe', '--server', relayUrl(), ...args], { timeoutMs: 30_000 });
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tdl-relay-'));
  await writeFile(join(dir, 'node.token'), `${NODE_TOKEN}\n`, { mode: 0o600 });
  await writeFile(join(dir, 'relay.token'), `${RELAY_TOKEN}\n`, { mode: 0o600 });
  // A long lease: a stopped node stays in the registry, so the relay has a node to report unavailable.
  scene = await ClusterScene.create({
    tag: 'rly',
    nodeCount: 2,
    routingMode: 'tunnel',
    ipam: 'block',
    leaseTtl: 30,
    nodeArgs: (i) => ['--flows-listen-addr', `10.248.0.${11 + i}:0`, '--flows-token-file', join(dir, 'node.token')],
  });
  client = await scene.addPod(0, { name: 'client', labels: { app: 'client' } });
  server = await scene.addPod(1, { name: 'server', labels: { app: 'server' } });
  await scene.waitConverged(20_000);
  const hub = s().cluster.hub;
  relay = spawn(
    'nsenter',
    [
      `--net=/var/run/netns/${hub}`, '--', TENDRIL_BIN, 'relay',
      '--listen-addr', `${relayUrl().replace('http://', '')}`,
      '--token-file', join(dir, 'relay.token'),
      '--kvstore', 'etcd', '--kvstore-opt', `etcd.endpoints=${s().cluster.etcdEndpoint}`,
      '--peer-token-file', join(dir, 'node.token'),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  relay.stdout!.on('data', (c: Buffer) => (relayOutput += c.toString()));
  relay.stderr!.on('data', (c: Buffer) => (relayOutput += c.toString()));
  await eventually(async () => relayOutput.includes('serving on') || relay!.exitCode !== null, 20_000, 'the relay serving');
  assert.equal(relay.exitCode, null, relayOutput);
});

after(async () => {
  if (relay && relay.exitCode === null) {
    relay.kill('SIGTERM');
    await new Promise((r) => relay!.once('exit', r));
  }
  await scene?.cleanup();
  if (dir !== '') await rm(dir, { recursive: true, force: true });
});

test('each node announces its flows address in the registry', T, async () => {
  const nodes = await s().nodeStatus(0);
  for (const n of s().nodes) {
    const rec = nodes.find((x) => x.name === n.name);
    assert.match(rec?.flows?.address ?? '', new RegExp(`^${n.ip.replace(/\./g, '\\.')}:\\d+$`), JSON.stringify(rec));
    assert.equal(rec?.flows?.tls, false);
  }
});

test('a cross-node connection: both nodes\' flows through the relay, merged in time order', T, async () => {
  const r = await client!.agent.tcpOnce({ dst: server!.ip, port: POD_TCP_PORT });
  assert.equal(r.outcome, 'open', JSON.stringify(r));
  let flows: Flow[] = [];
  let last = '';
  await eventually(
    async () => {
      const out = await observe(['--token-file', join(dir, 'relay.token'), '--last', '200', '--from-ip', client!.ip, '--to-ip', server!.ip, '--to-port', String(POD_TCP_PORT), '-o', 'json']);
      last = `${out.code} ${out.stdout} ${out.stderr}`;
      if (out.code !== 0) return false;
      flows = out.stdout.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Flow);
      return new Set(flows.map((f) => f.node)).size === 2;
    },
    15_000,
    `flows of both nodes (last answer: ${last})`,
  ).catch((err: Error) => assert.fail(`${err.message}: ${last}\nrelay: ${relayOutput.slice(-2000)}`));
  assert.deepEqual([...new Set(flows.map((f) => f.node))].sort(), [s().node(0).name, s().node(1).name].sort());
  const times = flows.map((f) => Date.parse(f.event.time));
  assert.deepEqual(times, [...times].sort((a, b) => a - b), 'in time order');
  // The raw answer says both nodes answered.
  const raw = await run(['nsenter', `--net=/var/run/netns/${s().cluster.hub}`, '--', 'curl', '-sS', '-H', `Authorization: Bearer ${RELAY_TOKEN}`, `${relayUrl()}/v1/flows?last=5`]);
  const statuses = raw.stdout.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as FlowLine).flatMap((l) => ('nodeStatus' in l ? [l.nodeStatus] : []));
  assert.deepEqual(statuses.map((x) => `${x.node} ${x.state}`).sort(), [`${s().node(0).name} ok`, `${s().node(1).name} ok`].sort(), raw.stdout);
});

test('the relay refuses a missing or wrong token', T, async () => {
  const missing = await observe(['--last', '1']);
  assert.notEqual(missing.code, 0);
  assert.match(missing.stderr, /401: this listener wants a bearer token/);
  await writeFile(join(dir, 'wrong.token'), 'not-the-token\n');
  const wrong = await observe(['--token-file', join(dir, 'wrong.token'), '--last', '1']);
  assert.notEqual(wrong.code, 0);
  assert.match(wrong.stderr, /401: the bearer token is not the one/);
});

test('a stopped node is reported unavailable; the other node\'s flows still come', T, async () => {
  await s().killAgent(1);
  const out = await observe(['--token-file', join(dir, 'relay.token'), '--last', '200', '--from-ip', client!.ip, '-o', 'json']);
  assert.equal(out.code, 0, out.stderr);
  assert.match(out.stderr, new RegExp(`node ${s().node(1).name} is unavailable: .*(ECONNREFUSED|EHOSTUNREACH|ETIMEDOUT|no answer)`));
  const flows = out.stdout.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Flow);
  assert.ok(flows.length > 0 && flows.every((f) => f.node === s().node(0).name), out.stdout);
});
