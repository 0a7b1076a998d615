import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CodedError } from '../../errors/codedError.js';
import { KernelError, errnoNumber } from '../kernel/errors.js';
import { DatapathError, DatapathErrorCode, isDatapathError } from '../types.js';
import { toDatapathError } from './kernel.js';

describe('KernelError to DatapathError', () => {
  const kindOf = (code: Parameters<typeof errnoNumber>[0]) => {
    const mapped = toDatapathError(new KernelError(errnoNumber(code), 'RTM_X tdl0', 'kernel says'));
    assert.ok(isDatapathError(mapped));
    return mapped.kind;
  };

  it('maps "not there" errnos to not-found, EEXIST to exists, the rest to failed', () => {
    assert.equal(kindOf('ENODEV'), 'not-found');
    assert.equal(kindOf('ENOENT'), 'not-found');
    assert.equal(kindOf('ESRCH'), 'not-found');
    assert.equal(kindOf('EADDRNOTAVAIL'), 'not-found');
    assert.equal(kindOf('EEXIST'), 'exists');
    assert.equal(kindOf('EINVAL'), 'failed');
    assert.equal(kindOf('EPERM'), 'failed');
    assert.equal(kindOf('ENETUNREACH'), 'failed');
  });

  it('keeps the operation and the kernel\'s text, and leaves other errors alone', () => {
    const mapped = toDatapathError(new KernelError(errnoNumber('ENETUNREACH'), 'RTM_NEWROUTE default via 10.0.0.1', 'Nexthop has invalid gateway')) as DatapathError;
    assert.match(mapped.message, /RTM_NEWROUTE default via 10\.0\.0\.1: ENETUNREACH .*Nexthop has invalid gateway/);
    assert.equal(mapped.stderr, 'Nexthop has invalid gateway');
    const other = new TypeError('bad name');
    assert.equal(toDatapathError(other), other);
  });

  it('are coded errors: code, kind and errno survive construction and show in JSON, with the cause', () => {
    const k = new KernelError(errnoNumber('ENODEV'), 'RTM_GETLINK tdl0', 'no such device');
    assert.ok(k instanceof CodedError && k instanceof Error);
    assert.deepEqual([k.name, k.code, k.errno, k.operation], ['KernelError', 'ENODEV', 19, 'RTM_GETLINK tdl0']);
    assert.deepEqual(JSON.parse(JSON.stringify(k)), { name: 'KernelError', code: 'ENODEV', message: k.message, errno: 19, operation: 'RTM_GETLINK tdl0', kernelMessage: 'no such device' });

    const d = toDatapathError(k) as DatapathError;
    assert.ok(d instanceof DatapathError && d instanceof CodedError);
    assert.deepEqual([d.name, d.code, d.kind], ['DatapathError', DatapathErrorCode['not-found'], 'not-found']);
    assert.equal(d.cause, k);
    const json = JSON.parse(JSON.stringify(d)) as Record<string, unknown>;
    assert.equal(json.kind, 'not-found');
    assert.equal(json.code, 'DATAPATH_NOT_FOUND');
    assert.equal((json.cause as Record<string, unknown>).code, 'ENODEV');
    for (const kind of ['not-found', 'exists', 'netns-gone', 'failed'] as const) {
      const e = new DatapathError(kind, 'x', ['ip', 'link'], 'stderr text');
      assert.equal(e.code, DatapathErrorCode[kind]);
      assert.equal(isDatapathError(e, kind), true);
      assert.equal(isDatapathError(e, kind === 'failed' ? 'exists' : 'failed'), false);
      assert.deepEqual([e.argv, e.stderr], [['ip', 'link'], 'stderr text']);
    }
  });
});
