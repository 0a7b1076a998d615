import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CodedError, MAX_CAUSE_DEPTH } from './codedError.js';

const FruitErrorCode = { ROTTEN: 'FRUIT_ROTTEN', MISSING: 'FRUIT_MISSING' } as const;
type FruitErrorCode = (typeof FruitErrorCode)[keyof typeof FruitErrorCode];

class FruitError extends CodedError<FruitErrorCode> {}

class MissingFruitError extends FruitError {
  constructor(readonly fruit: string) {
    super(FruitErrorCode.MISSING, `no ${fruit}`);
  }
}

class NumberedError extends CodedError<number> {}

describe('CodedError', () => {
  it('carries its code, its own class name and the instanceof chain', () => {
    const e = new MissingFruitError('pear');
    assert.equal(e.code, 'FRUIT_MISSING');
    assert.equal(e.name, 'MissingFruitError');
    assert.equal(e.message, 'no pear');
    assert.ok(e instanceof MissingFruitError && e instanceof FruitError && e instanceof CodedError && e instanceof Error);
    assert.equal(new FruitError(FruitErrorCode.ROTTEN, 'soft').name, 'FruitError');
    assert.equal(new NumberedError(7, 'bad config').code, 7);
    assert.match(String(e.stack), /^MissingFruitError: no pear\n/);
  });

  it('keeps its cause and prints a stable JSON without the stack', () => {
    const low = Object.assign(new Error('ECONNREFUSED 127.0.0.1:2379'), { code: 'ECONNREFUSED' });
    const mid = new FruitError(FruitErrorCode.ROTTEN, 'store unreachable', { cause: low });
    const top = new NumberedError(11, 'try again', { cause: mid });
    assert.equal(top.cause, mid);
    assert.equal(
      JSON.stringify(top),
      JSON.stringify({
        name: 'NumberedError',
        code: 11,
        message: 'try again',
        cause: { name: 'FruitError', code: 'FRUIT_ROTTEN', message: 'store unreachable', cause: { name: 'Error', message: 'ECONNREFUSED 127.0.0.1:2379', code: 'ECONNREFUSED' } },
      }),
    );
    assert.deepEqual(new FruitError(FruitErrorCode.ROTTEN, 'x', { cause: 42 }).toJSON(), { name: 'FruitError', code: 'FRUIT_ROTTEN', message: 'x', cause: '42' });
    assert.deepEqual(new FruitError(FruitErrorCode.ROTTEN, 'x').toJSON(), { name: 'FruitError', code: 'FRUIT_ROTTEN', message: 'x' });
  });

  it('cuts a cause chain that is too long or cyclic', () => {
    const a = new FruitError(FruitErrorCode.ROTTEN, 'a');
    const b = new FruitError(FruitErrorCode.ROTTEN, 'b', { cause: a });
    Object.defineProperty(a, 'cause', { value: b });
    let json: unknown = JSON.parse(JSON.stringify(b));
    let depth = 0;
    while (typeof json === 'object' && json !== null && 'cause' in json) {
      json = (json as { cause: unknown }).cause;
      depth++;
    }
    assert.equal(depth, MAX_CAUSE_DEPTH + 1);
    assert.equal(json, '[cause chain cut]');
  });
});
