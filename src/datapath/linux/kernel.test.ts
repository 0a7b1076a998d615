import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KernelError, errnoNumber } from '../kernel/errors.js';
import { DatapathError, isDatapathError } from '../types.js';
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
});
