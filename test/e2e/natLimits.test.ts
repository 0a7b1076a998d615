// Masquerade and conntrack at their limits, on real packets: a full SNAT
// map and a full conntrack map refuse new flows with their own reasons while
// every established connection still echoes (an LRU would have evicted and
// reset them); one pod over its conntrack budget gets its own drops while
// the other pod's connections still open; and a pod's ICMP error about a
// flow that reached it through a mapping leaves as the node's (the outside's
// connected UDP socket gets the port unreachable; untranslated, nothing would
// match it there). Each case is an agent of its own with the flags it needs.
// The full SNAT map also on IPv6 (--ipv6-masquerade, tendril_snat6).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, test } from 'node:test';
import type { Family } from '../support/family.js';
import { dropsBetween, MASQ_NODE_IP, type MasqueradeScene, startMasqueradeScene } from '../support/masqueradeScene.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { failures } from '../support/serviceProcess.js';

requireRoot('the NAT and conntrack limit tests');

// A pool per scene: a scene names its namespaces after its pool.
const pools: NetnsPool[] = [];
const scenes: MasqueradeScene[] = [];
after(async () => {
  for (const s of scenes) await s.cleanup();
  for (const p of pools) await p.cleanup();
});

async function scene(tag: string, subnet: number, agentArgs: string[], family: Family = 4): Promise<MasqueradeScene> {
  const pool = new NetnsPool(`nl${subnet}`);
  pools.push(pool);
  const s = await startMasqueradeScene(pool, { nodeName: `tdl-node-${tag}`, podCidr: `10.243.${subnet}.0/24`, agentArgs, family });
  scenes.push(s);
  return s;
}

const opened = (r: { outcome: string }[]) => r.filter((x) => x.outcome === 'open').length;

test('a full SNAT map refuses new flows (NAT_FULL) and every established connection still echoes', { timeout: 120_000 }, async () => {
  // 24 entries: 12 mappings, two sides each.
  const s = await scene('nlm-nat', 1, ['--bpf-nat-max', '24']);
  const before = await s.drops();
  const held = await s.holdConnections('client-a', 16, { timeoutMs: 1500 });
  const n = opened(held.opened);
  const delta = dropsBetween(before, await s.drops());
  assert.ok(n >= 8 && n <= 12, `as many connections opened as the map has mappings for: ${n}`);
  assert.ok((delta['NAT_FULL/egress'] ?? 0) > 0, `the refused ones were dropped as NAT_FULL: ${JSON.stringify(delta)}`);
  const again = await held.echoAll();
  assert.equal(opened(again), n, `every established connection still echoes: ${failures(again)}`);
  await held.close();
});

test('IPv6: a full tendril_snat6 refuses new flows (NAT_FULL) and every established connection still echoes', { timeout: 120_000 }, async () => {
  // --bpf-nat-max sizes both families' tables: 24 entries, 12 IPv6 mappings.
  const s = await scene('nlm-nat6', 5, ['--bpf-nat-max', '24'], 6);
  const dst = s.outside.addressesOf(6)[0]!;
  const before = await s.drops();
  const held = await s.holdConnections('client-a', 16, { timeoutMs: 1500, dst });
  const n = opened(held.opened);
  const delta = dropsBetween(before, await s.drops());
  assert.ok(n >= 8 && n <= 12, `as many connections opened as the map has mappings for: ${n} (${failures(held.opened)})`);
  assert.ok((delta['NAT_FULL/egress'] ?? 0) > 0, `the refused ones were dropped as NAT_FULL: ${JSON.stringify(delta)}`);
  const again = await held.echoAll();
  assert.equal(opened(again), n, `every established connection still echoes: ${failures(again)}`);
  assert.deepEqual([...new Set(again.flatMap((x) => x.answers.map((a) => a.peer)))], [s.nodeIp(6)]);
  await held.close();
});

test('a full conntrack map refuses new flows (CT_FULL) and every established connection still echoes', { timeout: 120_000 }, async () => {
  const s = await scene('nlm-ct', 2, ['--bpf-ct-tcp-max', '12']);
  const before = await s.drops();
  const held = await s.holdConnections('client-a', 16, { timeoutMs: 1500 });
  const n = opened(held.opened);
  const delta = dropsBetween(before, await s.drops());
  assert.ok(n >= 6 && n <= 12, `as many connections opened as the table has entries for: ${n}`);
  assert.ok((delta['CT_FULL/egress'] ?? 0) > 0, `the refused ones were dropped as CT_FULL: ${JSON.stringify(delta)}`);
  const again = await held.echoAll();
  assert.equal(opened(again), n, `every established connection still echoes: ${failures(again)}`);
  await held.close();
});

test('one pod over its conntrack budget is refused (CT_ENDPOINT_BUDGET); the other pod\'s connections still open', { timeout: 120_000 }, async () => {
  const s = await scene('nlm-bud', 3, ['--bpf-ct-endpoint-max', '8']);
  const before = await s.drops();
  const flood = await s.holdConnections('client-a', 12, { timeoutMs: 1500 });
  const n = opened(flood.opened);
  const delta = dropsBetween(before, await s.drops());
  assert.ok(n <= 8 && n >= 4, `client-a opened no more than its budget: ${n}`);
  assert.ok((delta['CT_ENDPOINT_BUDGET/egress'] ?? 0) > 0, `client-a's extra flows were refused as CT_ENDPOINT_BUDGET: ${JSON.stringify(delta)}`);
  const other = await s.holdConnections('client-b', 6);
  assert.equal(opened(other.opened), 6, `client-b is not held to client-a's budget: ${failures(other.opened)}`);
  assert.equal(opened(await flood.echoAll()), n, 'client-a\'s own established connections go on');
  await Promise.all([flood.close(), other.close()]);
});

/** Runs a Node script inside a namespace; resolves with its stdout once it exits 0. */
function nodeIn(netnsPath: string, script: string, args: string[] = []): { done: Promise<string>; kill(): void } {
  const child = spawn('nsenter', [`--net=${netnsPath}`, '--', process.execPath, '--input-type=module', '-e', script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr.on('data', (b: Buffer) => (err += b.toString()));
  const done = new Promise<string>((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`script exited ${code}: ${err || out}`))));
  });
  return { done, kill: () => child.kill('SIGKILL') };
}

// The outside: one UDP socket on 5400. The first datagram tells it the
// node's mapped port; it connects the socket to it and, once the pod's
// socket is closed, sends again. The pod's kernel answers port unreachable;
// only a translated error matches the connected socket (ECONNREFUSED).
const OUTSIDE_UDP = `
import dgram from 'node:dgram';
const s = dgram.createSocket('udp4');
const timer = setTimeout(() => { console.log('timeout'); process.exit(3); }, 15000);
s.once('message', (_m, rinfo) => {
  s.connect(rinfo.port, rinfo.address, () => {
    const again = setInterval(() => s.send('again'), 300);
    s.on('error', (e) => { clearInterval(again); clearTimeout(timer); console.log(JSON.stringify({ code: e.code, peer: rinfo.address, port: rinfo.port })); process.exit(0); });
  });
});
s.bind(5400, () => console.log('ready'));
`;

// The pod: one datagram from a fresh socket, closed at once.
const POD_UDP = `
import dgram from 'node:dgram';
const s = dgram.createSocket('udp4');
s.send('hello', 5400, process.argv[1], () => s.close());
`;

test('a pod\'s ICMP error about a reply that reached it through a mapping leaves translated: the outside\'s socket sees it', { timeout: 60_000 }, async () => {
  const s = await scene('nlm-icmp', 4, []);
  const outside = nodeIn(s.outside.netnsPath, OUTSIDE_UDP);
  try {
    // Wait until the outside listens.
    for (let i = 0; i < 50; i++) {
      const r = nodeIn(s.outside.netnsPath, "import dgram from 'node:dgram'; const x = dgram.createSocket('udp4'); x.bind(5400, () => { x.close(); process.exit(1); }); x.on('error', () => process.exit(0));");
      if (await r.done.then(() => true, () => false)) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    await nodeIn(s.pods['client-a'].netnsPath, POD_UDP, [s.outside.addresses[0]!]).done;
    const got = JSON.parse((await outside.done).trim().split('\n').pop()!) as { code: string; peer: string; port: number };
    assert.equal(got.code, 'ECONNREFUSED', 'the port unreachable reached the outside\'s connected socket: it names the node\'s address and mapped port');
    assert.equal(got.peer, MASQ_NODE_IP, 'the outside only ever talked to the node');
  } finally {
    outside.kill();
  }
});
