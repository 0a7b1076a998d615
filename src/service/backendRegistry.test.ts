import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { LbBackendState } from '../datapath/types.js';
import { BackendRegistry } from './backendRegistry.js';

const refs = (...entries: Array<[string, LbBackendState]>) => new Map(entries);

describe('BackendRegistry', () => {
  it('gives one ID per backend key, shared and counted by service, freed with the last', () => {
    const r = new BackendRegistry();
    const a = r.replaceRefs(1, [], refs(['10.0.0.1:80/TCP', 'active'], ['10.0.0.2:80/TCP', 'active']));
    assert.deepEqual(a.allocated, [1, 2]);
    const b = r.replaceRefs(2, [], refs(['10.0.0.2:80/TCP', 'terminating'], ['10.0.0.2:80/UDP', 'active']));
    assert.deepEqual(b.allocated, [3]);
    assert.equal(r.idOf('10.0.0.2:80/TCP'), 2);
    assert.equal(r.stateOf('10.0.0.2:80/TCP'), 'active');
    const c = r.replaceRefs(1, ['10.0.0.1:80/TCP', '10.0.0.2:80/TCP'], refs());
    assert.deepEqual(c.freed, [1]);
    assert.equal(r.stateOf('10.0.0.2:80/TCP'), 'terminating');
    const d = r.replaceRefs(2, ['10.0.0.2:80/TCP', '10.0.0.2:80/UDP'], refs());
    assert.deepEqual(d.freed.sort(), [2, 3]);
    assert.equal(r.size, 0);
    // IDs move forward: the freed ones are not handed out at once.
    assert.deepEqual(r.replaceRefs(3, [], refs(['10.0.0.1:80/TCP', 'active'])).allocated, [4]);
  });

  it('undoes a change exactly, freed IDs included', () => {
    const r = new BackendRegistry();
    r.replaceRefs(1, [], refs(['a:1/TCP', 'active'], ['b:1/TCP', 'active']));
    r.replaceRefs(2, [], refs(['b:1/TCP', 'maintenance']));
    const change = r.replaceRefs(1, ['a:1/TCP', 'b:1/TCP'], refs(['b:1/TCP', 'terminating'], ['c:1/TCP', 'active']));
    assert.deepEqual(change.freed, [1]);
    assert.deepEqual(change.allocated, [3]);
    assert.equal(r.stateOf('b:1/TCP'), 'terminating');
    change.undo();
    assert.equal(r.idOf('a:1/TCP'), 1);
    assert.equal(r.idOf('c:1/TCP'), undefined);
    assert.equal(r.keyOf(3), undefined);
    assert.equal(r.stateOf('b:1/TCP'), 'active');
    assert.deepEqual(r.refsOf(1, ['a:1/TCP', 'b:1/TCP']), refs(['a:1/TCP', 'active'], ['b:1/TCP', 'active']));
    assert.deepEqual(r.refsOf(2, ['b:1/TCP']), refs(['b:1/TCP', 'maintenance']));
  });

  it('takes persisted IDs back, refusing clashes, and drops claims nothing refers to', () => {
    const r = new BackendRegistry();
    assert.equal(r.claim('a:1/TCP', 40), true);
    assert.equal(r.claim('a:1/TCP', 40), true);
    assert.equal(r.claim('a:1/TCP', 41), false, 'a key keeps one ID');
    assert.equal(r.claim('b:1/TCP', 40), false, 'an ID belongs to one key');
    assert.equal(r.claim('b:1/TCP', 0), false);
    assert.equal(r.claim('z:1/TCP', 50), true);
    const c = r.replaceRefs(1, [], refs(['a:1/TCP', 'active'], ['b:1/TCP', 'active']));
    assert.deepEqual(c.allocated, [51], 'new IDs come after the restored ones');
    assert.deepEqual(r.dropUnreferenced(), [50]);
    assert.deepEqual(r.ids().sort(), [40, 51]);
  });

  it('wraps around and fails only when every ID is taken', () => {
    const r = new BackendRegistry(3);
    r.replaceRefs(1, [], refs(['a:1/TCP', 'active'], ['b:1/TCP', 'active'], ['c:1/TCP', 'active']));
    assert.throws(() => r.replaceRefs(2, [], refs(['d:1/TCP', 'active'])), RangeError);
    r.replaceRefs(1, ['a:1/TCP', 'b:1/TCP', 'c:1/TCP'], refs(['b:1/TCP', 'active'], ['c:1/TCP', 'active']));
    assert.deepEqual(r.replaceRefs(2, [], refs(['d:1/TCP', 'active'])).allocated, [1]);
  });
});
