// The service agent (serviceAgent.ts) as a backend: a client's reset ends that
// connection only. The services suites saw a backend die this way: a client
// reused the source port of a connection the backend still held (reset by
// another backend after this one left the service), the backend answered the
// new SYN with a challenge ACK, the client's kernel answered that with a reset,
// and the uncaught ECONNRESET ended the whole backend — every later connection
// to it refused or reset.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { NetnsPool } from './netns.js';
import { requireRoot } from './root.js';
import { run } from './run.js';
import { ServiceAgentProcess } from './serviceProcess.js';

requireRoot('the service agent test');
const PORT = 8080;
const pool = new NetnsPool('sva');
let backend: ServiceAgentProcess | undefined;

after(async () => {
  await backend?.stop();
  await pool.cleanup();
});

/** A client inside the namespace: one request, its answer, then a reset (RST) instead of a close. */
const RESETTING_CLIENT = `
const { connect } = require('node:net');
const s = connect(${PORT}, '127.0.0.1', () => s.write('?\\n'));
s.once('data', () => { s.resetAndDestroy(); setTimeout(() => process.exit(0), 100); });
s.on('error', (e) => { console.error(e.message); process.exit(1); });
`;

test('a backend keeps serving after a client resets its connection', async () => {
  const ns = await pool.add('ns');
  backend = await ServiceAgentProcess.start(ns.path, { name: 'be', tcpPorts: [PORT], udpPorts: [] });
  for (let i = 0; i < 3; i++) {
    const r = await run(['nsenter', `--net=${ns.path}`, '--', process.execPath, '-e', RESETTING_CLIENT]);
    assert.equal(r.code, 0, `the resetting client ran: ${r.stderr}`);
  }
  // The backend has read the resets by now (a crash would have ended it within this time).
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(backend.exited, undefined, 'the backend is still running');
  const sessions = await backend.tcpSessions({ dst: '127.0.0.1', port: PORT }, { count: 5, requests: 2, concurrency: 5 });
  assert.deepEqual(
    sessions.map((s) => `${s.outcome} ${s.answers.map((a) => a.name).join(',')}`),
    Array.from({ length: 5 }, () => 'open be,be'),
    'new connections are answered after the resets',
  );
});
