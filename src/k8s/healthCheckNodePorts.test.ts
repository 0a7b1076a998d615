import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { test } from 'node:test';
import { pino } from 'pino';
import { HealthCheckNodePorts } from './healthCheckNodePorts.js';

const listening = (srv: Server, port = 0) => new Promise<number>((resolve) => srv.listen(port, '127.0.0.1', () => resolve((srv.address() as { port: number }).port)));

test('a port another process holds is logged, not fatal, and served at the Service\'s next change once free; a Service moving port lets the old one go', async () => {
  const lines: Array<{ msg: string }> = [];
  const counts = new Map([['default/a', 2]]);
  const hc = new HealthCheckNodePorts({ logger: pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s) as { msg: string }) }), localEndpoints: (key) => counts.get(key) ?? 0, host: '127.0.0.1' });
  const squatter = createServer();
  const port = await listening(squatter);
  try {
    await hc.set('default/a', port);
    assert.deepEqual([...hc.ports()], []);
    assert.ok(lines.some((l) => /cannot be served/.test(l.msg)));
  } finally {
    await new Promise<void>((r) => squatter.close(() => r()));
  }
  await hc.set('default/a', port);
  assert.deepEqual([...hc.ports()], [['default/a', port]]);
  const r = await fetch(`http://127.0.0.1:${port}/`);
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('x-load-balancing-endpoint-weight'), '2');
  // Another Service asking for the same port does not take it.
  await hc.set('default/b', port);
  assert.deepEqual([...hc.ports()], [['default/a', port]]);
  const other = createServer();
  const next = await listening(other);
  await new Promise<void>((res) => other.close(() => res()));
  await hc.set('default/a', next);
  assert.deepEqual([...hc.ports()], [['default/a', next]]);
  await assert.rejects(fetch(`http://127.0.0.1:${port}/`), /fetch failed/);
  await hc.stop();
  assert.deepEqual([...hc.ports()], []);
});
