// The native connection client and server the masquerade bench and tests
// count on (bench/native/crr.c): what it reports must be what happened, in a
// namespace of the test's own. `make check-native` runs this against its
// ASan/UBSan build (TENDRIL_CRR_BIN).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { CRR_BIN, CrrServer, crrErrors, runCrrClient } from '../support/crr.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { run, runOk } from '../support/run.js';

requireRoot('the crr tests');

const pool = new NetnsPool('crr');
let ns: { name: string; path: string };
let server: CrrServer | undefined;

before(async () => {
  ns = await pool.add('a');
  await runOk(['ip', '-n', ns.name, 'addr', 'add', '10.201.0.1/24', 'dev', 'lo']);
  await runOk(['ip', '-n', ns.name, 'addr', 'add', '10.201.0.2/24', 'dev', 'lo']);
  await runOk(['ip', '-n', ns.name, 'addr', 'add', 'fd00:201::1/128', 'dev', 'lo', 'nodad']);
  server = await CrrServer.start(ns.path, ['10.201.0.1-10.201.0.2:7100-7101', '[fd00:201::1]:7100-7101']);
});

after(async () => {
  await server?.stop();
  await pool.cleanup();
});

test('connections to every destination of the ranges are answered and counted, each second and in all', async () => {
  const r = await runCrrClient(ns.path, { destinations: ['10.201.0.1-10.201.0.2:7100-7101'], seconds: 2, threads: 2 });
  assert.equal(r.destinations, 4);
  assert.equal(r.errorCount, 0, crrErrors(r));
  assert.ok(r.connections > 100, `connections in 2 s on loopback: ${r.connections}`);
  assert.equal(r.perSecond.reduce((a, b) => a + b, 0), r.connections, 'the seconds add up to the total');
  assert.ok(r.latencyUs.p50 > 0 && r.latencyUs.p50 <= r.latencyUs.p99 && r.latencyUs.p99 <= r.latencyUs.p999 && r.latencyUs.p999 <= r.latencyUs.max, JSON.stringify(r.latencyUs));
  assert.ok(r.cpuUs.user + r.cpuUs.system > 0);
  assert.equal(r.close, 'rst');
  // RST closes leave no TIME_WAIT: tens of thousands of connections per run do not use up the client's ports.
  const ss = await pool.exec(ns.name, ['ss', '-H', '-t', 'state', 'time-wait']);
  assert.equal(ss.stdout.trim(), '', 'no TIME_WAIT sockets after RST closes');
});

test('IPv6 destinations ([addr]:port, a port range) beside IPv4 ones, on one client', async () => {
  const r = await runCrrClient(ns.path, { destinations: ['[fd00:201::1]:7100-7101', '10.201.0.1:7100'], seconds: 1, threads: 1 });
  assert.equal(r.destinations, 3);
  assert.equal(r.errorCount, 0, crrErrors(r));
  assert.ok(r.connections > 50, `connections in 1 s on loopback: ${r.connections}`);
  // Every connection went to a listener of its own family: the server's IPv6 ones take IPv6 only.
  const ss = await pool.exec(ns.name, ['ss', '-H', '-t', '-l', '-n', 'sport', '= :7100']);
  assert.match(ss.stdout, /\[fd00:201::1\]:7100/);
});

test('--fin closes with FIN: the client holds TIME_WAIT', async () => {
  const r = await runCrrClient(ns.path, { destinations: ['10.201.0.1:7100'], seconds: 1, threads: 1, fin: true });
  assert.equal(r.errorCount, 0, crrErrors(r));
  assert.equal(r.close, 'fin');
  const ss = await pool.exec(ns.name, ['ss', '-H', '-t', 'state', 'time-wait']);
  assert.ok(ss.stdout.trim().split('\n').length > 0 && ss.stdout.trim() !== '', 'TIME_WAIT sockets after FIN closes');
});

test('failures are counted by step and errno name, never as connections', async () => {
  const refused = await runCrrClient(ns.path, { destinations: ['10.201.0.1:7199'], seconds: 1, threads: 1 });
  assert.equal(refused.connections, 0);
  assert.ok(refused.errorCount > 0);
  assert.deepEqual(Object.keys(refused.errors), ['connect:ECONNREFUSED']);
  // A port whose SYNs vanish (an nft drop in the test's namespace, gone with it): a connect past -T is a timeout.
  await runOk(['nsenter', `--net=${ns.path}`, '--', 'nft', '-f', '-'], { input: 'table ip tdlcrr {\n chain out {\n  type filter hook output priority 0; policy accept;\n  tcp dport 7101 drop\n }\n}\n' });
  const lost = await runCrrClient(ns.path, { destinations: ['10.201.0.1:7101'], seconds: 1, threads: 1, timeoutMs: 300 });
  assert.equal(lost.connections, 0);
  assert.deepEqual(Object.keys(lost.errors), ['connect:timeout'], crrErrors(lost));
  assert.ok(lost.errorCount >= 3 && lost.errorCount <= 5, `one timeout per 300 ms: ${lost.errorCount}`);
});

test('bad arguments are refused with exit code 2 and a message', async () => {
  for (const args of [['client', '-a', '10.201.0.1'], ['client', '-a', '10.201.0.2-10.201.0.1:1'], ['client', '-t', '0', '-a', '10.201.0.1:1'], ['client', '-a', '10.0.0.0-10.1.0.0:1-2'], ['client', '-a', '[fd00::1:7100'], ['client', '-a', '[fd00::zz]:7100'], ['client', '-a', '[fd00::1]7100'], ['server'], ['nothing']]) {
    const r = await run([CRR_BIN, ...args]);
    assert.equal(r.code, 2, `crr ${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /crr: |usage:/);
  }
});
