import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Backoff } from './backoff.js';

describe('Backoff', () => {
  test('doubles from initialMs, caps at maxMs, and starts over after reset()', () => {
    const b = new Backoff({ initialMs: 50, maxMs: 1000 });
    assert.deepEqual(Array.from({ length: 7 }, () => b.next()), [50, 100, 200, 400, 800, 1000, 1000]);
    assert.equal(b.attempts, 7);
    b.reset();
    assert.equal(b.attempts, 0);
    assert.equal(b.next(), 50);
  });

  test('full jitter stays below the un-jittered delay', () => {
    const b = new Backoff({ initialMs: 4, maxMs: 50, jitter: 'full' });
    const caps = [4, 8, 16, 32, 50, 50];
    for (const cap of caps) {
      const d = b.next();
      assert.ok(d >= 0 && d < cap, `${d} < ${cap}`);
    }
  });

  test('a zero back-off stays zero however long it runs', () => {
    const b = new Backoff({ initialMs: 0, maxMs: 5000 });
    for (let i = 0; i < 1100; i++) assert.equal(b.next(), 0);
  });
});
