import assert from 'node:assert/strict';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { after, afterEach, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { readFileSync, rmSync } from 'node:fs';
import { Etcd3 } from 'etcd3';
import { makeTestPki, startEtcd, type EtcdHarness } from '../../../test/support/etcdHarness.js';
import { createLogger } from '../../logging/logger.js';
import { recordWatch, rejectsWithCode, runBackendContract } from '../contract.js';
import { KvstoreErrorCode } from '../errors.js';
import { openBackend } from '../factory.js';
import { runChild } from '../testing/childProcess.js';
import type { Backend } from '../types.js';

const logger = createLogger('kvstore-test', 'error');
let etcd: EtcdHarness;

before(async () => {
  etcd = await startEtcd();
});
after(async () => {
  await etcd?.destroy();
});

// Everything a test opens is closed after it, pass or fail: a leaked gRPC
// channel would keep the test process alive after an assertion fails.
const opened: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const r of opened.splice(0).reverse()) await r.close();
});

function track<T extends { close(): Promise<void> }>(resource: T): T {
  opened.push(resource);
  return resource;
}

async function openEtcd(endpoint: string, extra: Record<string, string> = {}): Promise<Backend> {
  return track(await openBackend({ kind: 'etcd', options: { 'etcd.endpoints': endpoint, ...extra }, dataDir: '/nonexistent', logger }));
}

// The contract closes its own backends, so they are not tracked per test.
runBackendContract('etcd', async () => ({
  backend: await openBackend({ kind: 'etcd', options: { 'etcd.endpoints': etcd.endpoint }, dataDir: '/nonexistent', logger }),
}));

/**
 * A TCP relay between a client and etcd whose connections the test can cut,
 * to disconnect one client without touching etcd or other clients.
 */
class CuttableProxy {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  port = 0;

  constructor(private readonly target: number) {}

  async listen(port = 0): Promise<void> {
    const server = createServer((client) => {
      const upstream = connect(this.target, '127.0.0.1');
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        // A cut connection errors with ECONNRESET on the other side; that is the point.
        s.on('error', () => s.destroy());
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    this.port = (server.address() as { port: number }).port;
    this.server = server;
  }

  close(): Promise<void> {
    return this.cut();
  }

  /** Drops every connection and stops accepting new ones. */
  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const s of this.sockets) s.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

describe('etcd backend: behaviour across failures', { timeout: 90_000 }, () => {
  it('N processes doing CAS increments on one key end with exactly the sum', async () => {
    const kv = await openEtcd(etcd.endpoint);
    const key = `cas/${Date.now()}`;
    const procs = 4;
    const each = 25;
    const runs = Array.from({ length: procs }, () => runChild(['cas', 'etcd', etcd.endpoint, key, String(each)]));
    for (const r of runs) track({ close: async () => void r.child.kill('SIGKILL') });
    const results = await Promise.all(runs.map((r) => r.exited));
    for (const r of results) assert.equal(r.code, 0, r.stderr);
    const retries = runs.map((r) => (JSON.parse(r.lines[0] ?? '{}') as { retries: number }).retries);
    assert.equal((await kv.get(key))?.value, String(procs * each));
    assert.ok(retries.reduce((a, b) => a + b, 0) > 0, 'the processes never contended; the test proved nothing');
    await kv.close();
  });

  it('a watch cut off from etcd resumes with every missed event exactly once', async () => {
    const port = Number(new URL(etcd.endpoint).port);
    const proxy = track(new CuttableProxy(port));
    await proxy.listen();
    const watcherClient = await openEtcd(`http://127.0.0.1:${proxy.port}`);
    const writer = await openEtcd(etcd.endpoint);
    const base = `resume/${Date.now()}/`;
    const rec = recordWatch(watcherClient, base);
    await rec.watch.ready;
    await writer.put(`${base}0`, 'before');
    await rec.waitForEvents(1);

    const proxyPort = proxy.port;
    await proxy.cut();
    for (let i = 1; i <= 5; i++) await writer.put(`${base}${i}`, 'while cut');
    await writer.delete(`${base}0`);
    await sleep(300);
    assert.equal(rec.events.length, 1, 'nothing arrives while disconnected');
    await proxy.listen(proxyPort);
    await writer.put(`${base}6`, 'after');
    await rec.waitForEvents(8, 15_000);
    await sleep(200);
    assert.deepEqual(rec.events.map((e) => [e.type, e.key]), [
      ['put', `${base}0`],
      ...[1, 2, 3, 4, 5].map((i) => ['put', `${base}${i}`]),
      ['delete', `${base}0`],
      ['put', `${base}6`],
    ]);
    assert.deepEqual(rec.errors, []);
    await rec.watch.close();
    await watcherClient.close();
    await writer.close();
    await proxy.cut();
  });

  it('a watch cut in the middle of a history catch-up resumes where its events stopped', async () => {
    // etcd3 alone would resume from the catch-up response's header revision
    // (the store's current revision) and silently skip the rest of the history.
    const port = Number(new URL(etcd.endpoint).port);
    const proxy = track(new CuttableProxy(port));
    await proxy.listen();
    const writer = await openEtcd(etcd.endpoint);
    const base = `catchup/${Date.now()}/`;
    const total = 1500; // etcd sends catch-up in batches of 1000: the cut lands after the first
    const first = await writer.put(`${base}0`, 'v');
    let i = 1;
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        while (i < total) await writer.put(`${base}${i++}`, 'v');
      }),
    );
    const watcherClient = await openEtcd(`http://127.0.0.1:${proxy.port}`);
    const proxyPort = proxy.port;
    let cutDone: Promise<void> | undefined;
    const events: number[] = [];
    const watch = watcherClient.watch(base, { fromRevision: first.revision }, {
      onEvents: (batch) => {
        events.push(...batch.map((e) => e.modRevision));
        // Cut on the first batch, while most of the history is still to come.
        cutDone ??= proxy.cut().then(() => sleep(200)).then(() => proxy.listen(proxyPort));
      },
      onError: (err) => assert.fail(err),
    });
    const deadline = Date.now() + 20_000;
    while (events.length < total && Date.now() < deadline) await sleep(20);
    await cutDone;
    assert.ok(cutDone !== undefined);
    assert.equal(events.length, total, `got ${events.length} of ${total} events`);
    assert.equal(new Set(events).size, total, 'no event repeated');
    for (let k = 1; k < events.length; k++) assert.ok((events[k] as number) > (events[k - 1] as number));
    await watch.close();
    await watcherClient.close();
    await writer.close();
    await proxy.cut();
  });

  it('etcd restarted under a running client: calls recover and the watch resumes', async () => {
    const kv = await openEtcd(etcd.endpoint);
    const base = `restart/${Date.now()}/`;
    const rec = recordWatch(kv, base);
    await rec.watch.ready;
    await kv.put(`${base}a`, '1');
    await rec.waitForEvents(1);

    await etcd.stop();
    const down = await kv.status();
    assert.equal(down.connected, false);
    await etcd.start();

    // A fresh client writes first, possibly before the old client's watch is back.
    const other = await openEtcd(etcd.endpoint);
    await other.put(`${base}b`, '2');
    await other.close();
    // The running client's own calls work again (retrying through the restart).
    await kv.put(`${base}c`, '3');
    await rec.waitForEvents(3, 15_000);
    await sleep(200);
    assert.deepEqual(rec.events.map((e) => [e.key, e.value]), [
      [`${base}a`, '1'],
      [`${base}b`, '2'],
      [`${base}c`, '3'],
    ]);
    assert.equal((await kv.status()).connected, true);
    await rec.watch.close();
    await kv.close();
  });

  it('an unreachable etcd gives KVSTORE_UNAVAILABLE after the retry timeout', async () => {
    const proxy = track(new CuttableProxy(1));
    await proxy.listen();
    const port = proxy.port;
    await proxy.cut(); // a port nothing listens on
    const kv = await openEtcd(`http://127.0.0.1:${port}`, { 'etcd.retryTimeout': '1s', 'etcd.callTimeout': '500ms' });
    const started = Date.now();
    await rejectsWithCode(kv.get('x'), KvstoreErrorCode.UNAVAILABLE);
    await rejectsWithCode(kv.put('x', 'y'), KvstoreErrorCode.UNAVAILABLE);
    assert.ok(Date.now() - started < 10_000);
    const st = await kv.status();
    assert.equal(st.connected, false);
    assert.match(st.detail, new RegExp(String(port)));
    await kv.close();
  });

  it('bad options fail before any connection attempt', async () => {
    await rejectsWithCode(openBackend({ kind: 'etcd', options: {}, dataDir: '/x', logger }), KvstoreErrorCode.INVALID_OPTION);
    await rejectsWithCode(openEtcd('127.0.0.1:2379'), KvstoreErrorCode.INVALID_OPTION);
    await rejectsWithCode(openEtcd(etcd.endpoint, { 'etcd.trustedCAFile': '/nonexistent/ca.pem' }), KvstoreErrorCode.INVALID_OPTION);
    await rejectsWithCode(openEtcd(etcd.endpoint, { 'etcd.certFile': '/x.pem' }), KvstoreErrorCode.INVALID_OPTION);
    await rejectsWithCode(openEtcd(etcd.endpoint, { 'etcd.username': 'root' }), KvstoreErrorCode.INVALID_OPTION);
    await rejectsWithCode(openEtcd(etcd.endpoint, { 'etcd.callTimeout': 'soon' }), KvstoreErrorCode.INVALID_OPTION);
    await rejectsWithCode(openEtcd(etcd.endpoint, { 'embedded.path': '/tmp/x.db' }), KvstoreErrorCode.INVALID_OPTION);
  });
});

describe('etcd backend: TLS and authentication', { timeout: 60_000 }, () => {
  it('passes CA, client certificate and username/password through to etcd', async () => {
    const pki = makeTestPki();
    const secure = await startEtcd({ tls: pki });
    try {
      const tlsOpts = { 'etcd.trustedCAFile': pki.ca, 'etcd.certFile': pki.clientCert, 'etcd.keyFile': pki.clientKey };
      // Turn on etcd auth with a root user, through etcd3 directly: the Backend has no admin API.
      const admin = new Etcd3({
        hosts: secure.endpoint,
        credentials: { rootCertificate: readFileSync(pki.ca), certChain: readFileSync(pki.clientCert), privateKey: readFileSync(pki.clientKey) },
      });
      try {
        await admin.role('root').create();
        await admin.user('root').create('s3cret');
        await admin.user('root').addRole('root');
        await admin.auth.authEnable();
      } finally {
        admin.close();
      }

      const kv = await openEtcd(secure.endpoint, { ...tlsOpts, 'etcd.username': 'root', 'etcd.password': 's3cret' });
      await kv.put('tls/a', 'secret value');
      assert.equal((await kv.get('tls/a'))?.value, 'secret value');

      const wrongPassword = await openEtcd(secure.endpoint, { ...tlsOpts, 'etcd.username': 'root', 'etcd.password': 'nope', 'etcd.retryTimeout': '1s' });
      await rejectsWithCode(wrongPassword.get('tls/a'), KvstoreErrorCode.AUTH_FAILED);

      // A client that does not trust the server's CA never gets a connection.
      const noTls = await openEtcd(secure.endpoint.replace('https:', 'http:'), { 'etcd.retryTimeout': '1s', 'etcd.callTimeout': '500ms' });
      await rejectsWithCode(noTls.get('tls/a'), KvstoreErrorCode.UNAVAILABLE);
    } finally {
      await secure.destroy();
      rmSync(pki.dir, { recursive: true, force: true });
    }
  });
});
