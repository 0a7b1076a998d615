import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { UndoList } from './undoList.js';

describe('UndoList', () => {
  test('runs steps newest first, each once; a failing step does not stop the older ones and is answered with its label', async () => {
    const undo = new UndoList();
    const ran: string[] = [];
    undo.add(() => ran.push('first'), 'first');
    undo.add(async () => {
      ran.push('second');
      throw new Error('second broke');
    }, 'second');
    undo.add(async () => {
      await new Promise((r) => setTimeout(r, 5));
      ran.push('third');
    }, 'third');
    assert.equal(undo.size, 3);
    const failures = await undo.runAll();
    assert.deepEqual(ran, ['third', 'second', 'first']);
    assert.deepEqual(failures.map((f) => [f.label, (f.error as Error).message]), [['second', 'second broke']]);
    assert.equal(undo.size, 0);
    assert.deepEqual(await undo.runAll(), []);
    assert.deepEqual(ran, ['third', 'second', 'first']);
  });

  test('rollBack logs each failed step with the operation\'s context', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) });
    const undo = new UndoList();
    undo.add(() => {
      throw new Error('gone');
    }, 'remove link');
    undo.add(() => undefined, 'fine');
    await undo.rollBack(log, 'rollback step failed', { containerId: 'c1' });
    assert.equal(lines.length, 1);
    assert.equal(lines[0]!.msg, 'rollback step failed');
    assert.equal(lines[0]!.step, 'remove link');
    assert.equal(lines[0]!.containerId, 'c1');
    assert.equal((lines[0]!.err as { message: string }).message, 'gone');
  });
});
