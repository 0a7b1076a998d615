// The relay over real HTTP servers on loopback: each node is the agent's own
// flows listener (GET /v1/flows over a FlowRing), the relay merges their
// answers in time order, applies `last` to the merge, reports a node that does
// not answer, follows new flows through its reorder window, and asks for the
// bearer token. Also the listener's access rules.
import { FLOW_UI_ROUTES } from '../flowui/index.js';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { FlowsListener } from '../api/server/flowsListener.js';
import { bearerTokenMatches, checkListenOptions, listenFlags } from '../api/server/listenAccess.js';
import type { Health } from '../api/types.js';
import { getText, queryString, streamNdjson } from '../client/ndjsonStream.js';
import { ConfigError } from '../errors/configError.js';
import { type FlowLine, FlowRing } from '../flow/index.js';
import { FIXED_FLOW_CLOCK, recordEvent } from '../flow/testing/recordEvent.js';
import { createLogger } from '../logging/logger.js';
import type { MonitorEvent, MonitorPeer } from '../monitor/index.js';
import { mergeHistories, ReorderWindow, type TimedLine } from './merge.js';
import { parsePeer, type PeerSource, type RelayPeer, StaticPeers } from './peers.js';
import { Relay } from './relay.js';
import type { PeerClientOptions } from './relaySession.js';

const log = createLogger('relay-test', 'silent');
const WEB: MonitorPeer = { endpoint: 12, pod: { namespace: 'shop', name: 'web-7d9' }, identity: 30012, labels: ['k8s:app=web'], ip: '10.0.0.12', port: 40312 };
const DB: MonitorPeer = { endpoint: 13, pod: { namespace: 'shop', name: 'db-0' }, identity: 30013, labels: ['k8s:app=db'], ip: '10.0.0.13', port: 5432 };
const T0 = Date.parse('2026-11-29T12:00:00.000Z');

/** A distinct flow (its own destination port) at T0 + ms. */
function event(ms: number, port: number): MonitorEvent {
  return { type: 'trace', tracePoint: 'to-endpoint', direction: 'ingress', time: new Date(T0 + ms).toISOString(), source: WEB, destination: { ...DB, port }, protocol: 'tcp', tcpFlags: ['SYN'], interface: { ifindex: 7, name: 'lxc12' }, length: 74 };
}

const HEALTH = { health: async () => ({ status: 'ok' }) as unknown as Health };
const POLICY = { revision: 7, clusterRevision: 0, list: () => [], lost: () => [] };
const TOKEN = 'tdl-test-token';

const closers: Array<() => Promise<void>> = [];
after(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

/** A node: its flow history behind its own flows listener on 127.0.0.1. */
async function node(name: string, token?: string): Promise<{ ring: FlowRing; url: URL; listener: FlowsListener }> {
  const ring = new FlowRing({ capacity: 1000, node: name, clock: FIXED_FLOW_CLOCK });
  const listener = await FlowsListener.start({ host: '127.0.0.1', port: 0 }, { flows: ring, policy: POLICY, health: HEALTH, log, access: token ? { token } : {}, validateResponses: true });
  closers.push(() => listener.close());
  return { ring, url: new URL(`http://127.0.0.1:${listener.address.port}`), listener };
}

const CLIENT: PeerClientOptions = { token: TOKEN, connectTimeoutMs: 2000, historyTimeoutMs: 3000, reorderWindowMs: 200, retry: { initialMs: 200, maxMs: 1000 } };

async function relay(peers: Array<{ name: string; url: URL }>, token?: string): Promise<{ relay: Relay; url: URL }> {
  const r = await Relay.start({ listen: { host: '127.0.0.1', port: 0 }, access: token ? { token } : {}, peers: new StaticPeers(peers), client: CLIENT, log });
  closers.push(() => r.close());
  return { relay: r, url: new URL(`http://127.0.0.1:${r.address.port}`) };
}

const failures = { status: (s: number, _b: unknown, t: string) => new Error(`${s}: ${t}`), connect: (e: Error) => e };

/** A history answer's lines. */
async function history(url: URL, params: Array<[string, string]>, token?: string): Promise<FlowLine[]> {
  const lines: FlowLine[] = [];
  await streamNdjson<FlowLine>({ url, ...(token ? { token } : {}) }, `/v1/flows${queryString(params)}`, (l) => lines.push(l), {}, failures);
  return lines;
}

/** Waits (5 s at most) until `cond` holds of the lines read so far; the failure shows them. */
async function waitUntil(lines: FlowLine[], what: string, cond: () => boolean): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > 5000) throw new Error(`${what}: ${JSON.stringify(lines)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const flowsOf = (lines: FlowLine[]) => lines.flatMap((l) => ('flow' in l ? [`${l.flow.node}@${Date.parse(l.flow.event.time) - T0}`] : []));
const statusesOf = (lines: FlowLine[]) => lines.flatMap((l) => ('nodeStatus' in l ? [l.nodeStatus] : []));

describe('merge', () => {
  const line = (node: string, time: number): TimedLine => ({ node, time, text: `${node}${time}` });

  test('k-way by time (node name on a tie), last applied to the merge', () => {
    const a = [line('a', 1), line('a', 4), line('a', 9)];
    const b = [line('b', 2), line('b', 4), line('b', 5)];
    const c: TimedLine[] = [];
    assert.deepEqual(mergeHistories([a, b, c]).map((l) => l.text), ['a1', 'b2', 'a4', 'b4', 'b5', 'a9']);
    assert.deepEqual(mergeHistories([a, b, c], 3).map((l) => l.text), ['b4', 'b5', 'a9']);
    assert.deepEqual(mergeHistories([a, b], 0), []);
  });

  test('the reorder window holds each line windowMs after it arrived and lets them out in time order', () => {
    const w = new ReorderWindow(100);
    const out: string[] = [];
    w.push(line('a', 30), 0);
    w.push(line('b', 10), 50);
    w.drain(99, (l) => out.push(l.text));
    assert.equal(out.length, 0);
    // b10 is the oldest and is due at 150: a30 waits behind it, so the order holds.
    w.drain(120, (l) => out.push(l.text));
    assert.equal(out.length, 0);
    w.drain(150, (l) => out.push(l.text));
    assert.deepEqual(out, ['b10', 'a30']);
  });
});

describe('relay over real listeners', () => {
  test('history: the nodes\' flows in time order, last of the merge, each node ok with its count', async () => {
    const a = await node('tdl-a', TOKEN);
    const b = await node('tdl-b', TOKEN);
    for (const ms of [10, 30, 50]) recordEvent(a.ring, event(ms, 1000 + ms));
    for (const ms of [20, 40, 60]) recordEvent(b.ring, event(ms, 2000 + ms));
    const { url } = await relay([{ name: 'tdl-a', url: a.url }, { name: 'tdl-b', url: b.url }]);
    const all = await history(url, []);
    assert.deepEqual(flowsOf(all), ['tdl-a@10', 'tdl-b@20', 'tdl-a@30', 'tdl-b@40', 'tdl-a@50', 'tdl-b@60']);
    const last = await history(url, [['last', '3']]);
    assert.deepEqual(flowsOf(last), ['tdl-b@40', 'tdl-a@50', 'tdl-b@60']);
    assert.deepEqual(statusesOf(last), [
      { node: 'tdl-a', state: 'ok', flows: 1 },
      { node: 'tdl-b', state: 'ok', flows: 2 },
    ]);
    // The filter goes to every node.
    assert.deepEqual(flowsOf(await history(url, [['to-port', '1030'], ['to-port', '2060']])), ['tdl-a@30', 'tdl-b@60']);
    assert.deepEqual(flowsOf(await history(url, [['node', 'tdl-b'], ['last', '1']])), ['tdl-b@60']);
    // A bad filter is the relay's 400, before any node is asked.
    await assert.rejects(history(url, [['verdict', 'maybe']]), /400: .*--verdict must be one of/);
  });

  test('a node that does not answer is reported unavailable, the others\' flows still come', async () => {
    const a = await node('tdl-a2', TOKEN);
    recordEvent(a.ring, event(5, 1005));
    const gone = await node('tdl-gone', TOKEN);
    await gone.listener.close();
    const wrongToken = await node('tdl-locked', 'another-token');
    recordEvent(wrongToken.ring, event(6, 1006));
    const { url } = await relay([
      // First: a node without an address fails at once, and the answer still waits for the others.
      { name: 'tdl-bare' } as { name: string; url: URL },
      { name: 'tdl-a2', url: a.url },
      { name: 'tdl-gone', url: gone.url },
      { name: 'tdl-locked', url: wrongToken.url },
    ]);
    const lines = await history(url, []);
    assert.deepEqual(flowsOf(lines), ['tdl-a2@5']);
    const st = statusesOf(lines);
    assert.deepEqual(st.find((s) => s.node === 'tdl-a2'), { node: 'tdl-a2', state: 'ok', flows: 1 });
    assert.equal(st.find((s) => s.node === 'tdl-gone')?.state, 'unavailable');
    assert.deepEqual(st.find((s) => s.node === 'tdl-bare'), { node: 'tdl-bare', state: 'unavailable', message: 'no flows address' });
    assert.match(st.find((s) => s.node === 'tdl-gone')?.message ?? '', /ECONNREFUSED/);
    assert.match(st.find((s) => s.node === 'tdl-locked')?.message ?? '', /401: .*not the one this listener wants/);
  });

  test('following: new flows of both nodes in time order through the window; a node that stops is reported', async () => {
    const a = await node('tdl-fa', TOKEN);
    const b = await node('tdl-fb', TOKEN);
    recordEvent(a.ring, event(1, 1001));
    const { url } = await relay([{ name: 'tdl-fa', url: a.url }, { name: 'tdl-fb', url: b.url }]);
    const lines: FlowLine[] = [];
    const abort = new AbortController();
    const done = streamNdjson<FlowLine>({ url }, `/v1/flows?last=5&follow=true`, (l) => lines.push(l), { signal: abort.signal }, failures);
    const until = (what: string, cond: () => boolean) => waitUntil(lines, what, cond);
    await until('history part', () => statusesOf(lines).length === 2);
    assert.deepEqual(flowsOf(lines), ['tdl-fa@1']);
    // Recorded out of time order across nodes within the window: they leave in time order.
    recordEvent(b.ring, event(300, 2300));
    recordEvent(a.ring, event(200, 1200));
    recordEvent(b.ring, event(400, 2400));
    recordEvent(a.ring, event(350, 1350));
    await until('new flows', () => flowsOf(lines).length === 5);
    assert.deepEqual(flowsOf(lines), ['tdl-fa@1', 'tdl-fa@200', 'tdl-fb@300', 'tdl-fa@350', 'tdl-fb@400']);
    await b.listener.close();
    await until('tdl-fb unavailable', () => statusesOf(lines).some((s) => s.node === 'tdl-fb' && s.state === 'unavailable'));
    abort.abort();
    await done;
  });

  test('following: a node that joins the peers is read from then on, one that leaves is reported', async () => {
    const a = await node('tdl-ja', TOKEN);
    const b = await node('tdl-jb', TOKEN);
    let peers: RelayPeer[] = [{ name: 'tdl-ja', url: a.url }];
    const listeners = new Set<() => void>();
    const source: PeerSource = { start: async () => undefined, stop: async () => undefined, list: () => peers, subscribe: (l) => (listeners.add(l), () => listeners.delete(l)) };
    const r = await Relay.start({ listen: { host: '127.0.0.1', port: 0 }, access: {}, peers: source, client: CLIENT, log });
    closers.push(() => r.close());
    const lines: FlowLine[] = [];
    const abort = new AbortController();
    const done = streamNdjson<FlowLine>({ url: new URL(`http://127.0.0.1:${r.address.port}`) }, '/v1/flows?last=0&follow=true', (l) => lines.push(l), { signal: abort.signal }, failures);
    const until = (what: string, cond: () => boolean) => waitUntil(lines, what, cond);
    await until('history part', () => statusesOf(lines).length === 1);
    peers = [...peers, { name: 'tdl-jb', url: b.url }];
    for (const l of listeners) l();
    await until('tdl-jb joined', () => statusesOf(lines).some((x) => x.node === 'tdl-jb' && x.state === 'ok'));
    recordEvent(b.ring, event(500, 2500));
    await until('tdl-jb\'s new flow', () => flowsOf(lines).includes('tdl-jb@500'));
    peers = [{ name: 'tdl-jb', url: b.url }];
    for (const l of listeners) l();
    await until('tdl-ja left', () => statusesOf(lines).some((x) => x.node === 'tdl-ja' && x.state === 'unavailable' && /left the node registry/.test(x.message ?? '')));
    abort.abort();
    await done;
  });

  test('the relay wants its token: refused without it and with a wrong one', async () => {
    const a = await node('tdl-ta', TOKEN);
    const { url } = await relay([{ name: 'tdl-ta', url: a.url }], 'relay-token');
    await assert.rejects(history(url, []), /401: .*wants a bearer token/);
    await assert.rejects(history(url, [], 'wrong'), /401: .*not the one/);
    assert.deepEqual(statusesOf(await history(url, [], 'relay-token')), [{ node: 'tdl-ta', state: 'ok', flows: 0 }]);
    const policy = await getText({ url, token: 'relay-token' }, '/v1/policy');
    assert.equal(policy.status, 200);
    assert.equal((JSON.parse(policy.text) as { revision: number }).revision, 7);
    const health = await getText({ url, token: 'relay-token' }, '/healthz');
    assert.equal(health.status, 200, health.text);
    assert.equal((await getText({ url }, '/healthz')).status, 401);
  });

  test('the web UI\'s page and assets need no token (they hold no data; the page sends the token it was opened with), its data does', async () => {
    const a = await node('tdl-ua', TOKEN);
    const r = await Relay.start({ listen: { host: '127.0.0.1', port: 0 }, access: { token: 'relay-token' }, peers: new StaticPeers([{ name: 'tdl-ua', url: a.url }]), client: CLIENT, log, ...FLOW_UI_ROUTES });
    closers.push(() => r.close());
    const url = new URL(`http://127.0.0.1:${r.address.port}`);
    const page = await getText({ url }, '/');
    assert.equal(page.status, 200, page.text);
    assert.match(page.text, /<script[^>]+src="[^"]*assets\//);
    const asset = /src="\/?(assets\/[^"]+)"/.exec(page.text)![1]!;
    assert.equal((await getText({ url }, `/${asset}`)).status, 200);
    assert.equal((await getText({ url }, '/v1/flows')).status, 401);
    assert.equal((await getText({ url }, '/v1/policy')).status, 401);
    // Not normalized by the router: the assets route takes it, and holds no such file.
    assert.equal((await getText({ url }, '/assets/../v1/policy')).status, 404, 'no way round the token through the assets path');
  });
});

/** A CA, a server certificate for 127.0.0.1 and a client certificate it signed (openssl), in a temporary directory. */
async function certificates(): Promise<{ ca: Buffer; cert: Buffer; key: Buffer; clientCert: Buffer; clientKey: Buffer }> {
  const dir = await mkdtemp(join(tmpdir(), 'tdl-relay-tls-'));
  closers.push(() => rm(dir, { recursive: true, force: true }));
  const ossl = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  ossl(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'ca.key', '-out', 'ca.crt', '-subj', '/CN=tdl-ca', '-days', '1']);
  for (const [name, ext] of [['server', 'subjectAltName=IP:127.0.0.1'], ['client', 'extendedKeyUsage=clientAuth']] as const) {
    ossl(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=tdl-${name}`]);
    await writeFile(join(dir, `${name}.ext`), `${ext}\n`);
    ossl(['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', `${name}.crt`, '-days', '1', '-extfile', `${name}.ext`]);
  }
  const read = (f: string) => readFileSync(join(dir, f));
  return { ca: read('ca.crt'), cert: read('server.crt'), key: read('server.key'), clientCert: read('client.crt'), clientKey: read('client.key') };
}

describe('TLS', () => {
  test('a node\'s listener with mTLS: the relay with its CA and a client certificate reads it; without the certificate the node is unavailable', async () => {
    const c = await certificates();
    const ring = new FlowRing({ capacity: 10, node: 'tdl-tls', clock: FIXED_FLOW_CLOCK });
    recordEvent(ring, event(7, 1007));
    const listener = await FlowsListener.start({ host: '127.0.0.1', port: 0 }, { flows: ring, policy: POLICY, health: HEALTH, log, access: { tls: { cert: c.cert, key: c.key, clientCa: c.ca } } });
    closers.push(() => listener.close());
    const url = new URL(`https://127.0.0.1:${listener.address.port}`);
    const peers = new StaticPeers([{ name: 'tdl-tls', url }]);
    const withCert = await Relay.start({ listen: { host: '127.0.0.1', port: 0 }, access: {}, peers, client: { ...CLIENT, ca: c.ca, cert: c.clientCert, key: c.clientKey }, log });
    closers.push(() => withCert.close());
    const lines = await history(new URL(`http://127.0.0.1:${withCert.address.port}`), []);
    assert.deepEqual(flowsOf(lines), ['tdl-tls@7']);
    const noCert = await Relay.start({ listen: { host: '127.0.0.1', port: 0 }, access: {}, peers: new StaticPeers([{ name: 'tdl-tls', url }]), client: { ...CLIENT, ca: c.ca }, log });
    closers.push(() => noCert.close());
    const refused = statusesOf(await history(new URL(`http://127.0.0.1:${noCert.address.port}`), []));
    assert.equal(refused[0]?.state, 'unavailable', JSON.stringify(refused));
  });
});

describe('listener access', () => {
  const flags = listenFlags('--flows-');
  test('an address other hosts reach needs TLS or a token; loopback does not', () => {
    assert.throws(() => checkListenOptions('0.0.0.0:4245', {}, flags), (e: unknown) => e instanceof ConfigError && /--flows-listen-addr 0\.0\.0\.0:4245 can be reached from other hosts/.test(e.message));
    assert.throws(() => checkListenOptions(':4245', {}, flags), ConfigError);
    assert.throws(() => checkListenOptions('10.0.0.1:4245', { tlsCert: '/c' }, flags), /--flows-tls-cert and --flows-tls-key go together/);
    assert.throws(() => checkListenOptions('127.0.0.1:4245', { tlsClientCa: '/ca' }, flags), /--flows-tls-client-ca checks client certificates/);
    assert.deepEqual(checkListenOptions('127.0.0.1:4245', {}, flags), { host: '127.0.0.1', port: 4245 });
    assert.deepEqual(checkListenOptions('[::1]:0', {}, flags), { host: '::1', port: 0 });
    assert.deepEqual(checkListenOptions('10.0.0.1:4245', { tokenFile: '/t' }, flags), { host: '10.0.0.1', port: 4245 });
  });

  test('the token is compared whole', () => {
    assert.ok(bearerTokenMatches('Bearer abc', 'abc'));
    assert.ok(!bearerTokenMatches('Bearer abcd', 'abc'));
    assert.ok(!bearerTokenMatches('Bearer ab', 'abc'));
    assert.ok(!bearerTokenMatches('abc', 'abc'));
    assert.ok(!bearerTokenMatches(undefined, 'abc'));
  });

  test('peers are name=http(s)://host:port', () => {
    assert.equal(parsePeer('node-a=https://10.0.0.11:4245').url?.port, '4245');
    assert.throws(() => parsePeer('node-a'), /use name=http\(s\):\/\/host:port/);
    assert.throws(() => parsePeer('node-a=ftp://x:1'), /must be http/);
  });
});
