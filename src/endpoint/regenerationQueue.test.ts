import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EndpointErrorCode, isEndpointError } from './errors.js';
import { RegenerationQueue } from './regenerationQueue.js';

/** A run function whose runs are released one by one by the test. */
function steppedRuns() {
  const pending: Array<{ n: number; finish: (fail?: Error) => void }> = [];
  let started = 0;
  const run = () =>
    new Promise<number>((resolve, reject) => {
      const n = ++started;
      pending.push({ n, finish: (fail) => (fail ? reject(fail) : resolve(n)) });
    });
  const next = async () => {
    while (pending.length === 0) await new Promise((r) => setImmediate(r));
    return pending.shift()!;
  };
  return { run, next, started: () => started };
}

test('requests in one burst share one run; requests during a run share the next one', async () => {
  const s = steppedRuns();
  const q = new RegenerationQueue(s.run, 'endpoint 1');
  const burst = [q.request(), q.request(), q.request()];
  (await s.next()).finish();
  assert.deepEqual(await Promise.all(burst), [1, 1, 1]);
  const a = q.request();
  const first = await s.next();
  const during = [q.request(), q.request()];
  assert.equal(q.pending, true);
  first.finish();
  assert.equal(await a, 2);
  (await s.next()).finish();
  assert.deepEqual(await Promise.all(during), [3, 3]);
  assert.equal(s.started(), 3);
  await q.idle();
  assert.equal(q.busy, false);
});

test('a failed run rejects only the requests it served; the next run goes on', async () => {
  const s = steppedRuns();
  const q = new RegenerationQueue(s.run, 'endpoint 1');
  const failing = q.request();
  const first = await s.next();
  const later = q.request();
  first.finish(new Error('injected'));
  await assert.rejects(failing, /injected/);
  (await s.next()).finish();
  assert.equal(await later, 2);
});

test('close waits for the running regeneration, rejects the queued one and refuses new ones', async () => {
  const s = steppedRuns();
  const q = new RegenerationQueue(s.run, 'endpoint 1');
  const running = q.request();
  const first = await s.next();
  const queued = q.request();
  let closed = false;
  const closing = q.close().then(() => (closed = true));
  const disconnecting = (err: unknown) => isEndpointError(err, EndpointErrorCode.DISCONNECTING);
  await assert.rejects(queued, disconnecting);
  assert.equal(closed, false, 'close waits for the running one');
  first.finish();
  assert.equal(await running, 1);
  await closing;
  await assert.rejects(q.request(), disconnecting);
  assert.equal(s.started(), 1);
});
