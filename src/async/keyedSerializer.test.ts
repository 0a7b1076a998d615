import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { KeyedSerializer, Serializer } from './keyedSerializer.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('KeyedSerializer', () => {
  test('one key runs in call order; a failure does not block the key', async () => {
    const s = new KeyedSerializer();
    const order: string[] = [];
    const slow = s.run('k', async () => {
      await sleep(20);
      order.push('a');
    });
    const failing = s.run('k', async () => {
      order.push('b');
      throw new Error('boom');
    });
    const other = s.run('other', async () => order.push('x'));
    const last = s.run('k', async () => order.push('c'));
    await Promise.all([slow, failing.catch(() => undefined), other, last]);
    assert.deepEqual(order, ['x', 'a', 'b', 'c']);
    await s.idle();
  });

  test('held() names the keys with work queued or running, and forgets a key once its work is done', async () => {
    const s = new KeyedSerializer();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const a = s.run('a', () => gate);
    const b = s.run('b', () => Promise.reject(new Error('fails')));
    assert.deepEqual([...s.held()].sort(), ['a', 'b']);
    await assert.rejects(b, /fails/);
    await s.settled('b');
    assert.deepEqual([...s.held()], ['a']);
    release();
    await a;
    await s.idle();
    assert.equal(s.held().size, 0);
  });

  test('settled() waits for the work queued so far, idle() also for work queued meanwhile', async () => {
    const s = new KeyedSerializer();
    const done: string[] = [];
    void s.run('k', async () => {
      await sleep(10);
      done.push('first');
    });
    const settled = s.settled().then(() => [...done]);
    void s.run('k', async () => {
      await sleep(10);
      done.push('second');
    });
    assert.deepEqual(await settled, ['first']);
    const s2 = new KeyedSerializer();
    void s2.run('k', async () => {
      await sleep(5);
      void s2.run('j', async () => {
        await sleep(5);
        done.push('queued meanwhile');
      });
    });
    await s2.idle();
    assert.equal(done.at(-1), 'queued meanwhile');
  });
});

describe('Serializer', () => {
  test('runs one operation at a time; a throwing one is its caller\'s failure only', async () => {
    const s = new Serializer();
    let running = 0;
    let most = 0;
    const op = async () => {
      running++;
      most = Math.max(most, running);
      await sleep(5);
      running--;
    };
    const results = await Promise.allSettled([s.run(op), s.run(() => { throw new Error('sync throw'); }), s.run(op), s.run(() => 7)]);
    assert.equal(most, 1);
    assert.deepEqual(results.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
    assert.equal((results[3] as PromiseFulfilledResult<number>).value, 7);
    assert.equal(s.busy, false);
  });
});
