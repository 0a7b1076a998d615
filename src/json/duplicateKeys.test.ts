import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { findDuplicateKey } from './duplicateKeys.js';

describe('findDuplicateKey', () => {
  test('finds a repeated key at the top level, nested in objects and arrays, and spelled with escapes', () => {
    assert.deepEqual(findDuplicateKey('{"a":1,"a":2}'), { key: 'a', path: '' });
    assert.deepEqual(findDuplicateKey('{"x":{"y":[0,{"b":1, "b" :2}]}}'), { key: 'b', path: '/x/y/1' });
    assert.deepEqual(findDuplicateKey('{"a":1,"\\u0061":2}'), { key: 'a', path: '' });
    assert.deepEqual(findDuplicateKey('{"k\\"q":1,"k\\"q":2}'), { key: 'k"q', path: '' });
  });

  test('leaves alone what is no duplicate: the same key in sibling objects, a value equal to a key, strings holding braces', () => {
    for (const text of ['{"a":{"a":1},"b":{"a":2}}', '{"a":"a","b":"a"}', '[{"a":1},{"a":1}]', '{"s":"{\\"a\\":1,\\"a\\":2}","t":"]}"}', '"a"', '[]', '{}']) {
      assert.equal(findDuplicateKey(text), undefined, text);
    }
  });

  test('text that is no JSON is left to the parser; a deep body does not run the stack out', () => {
    for (const text of ['{"a":1,"a', '{"a', '}}}]]', '{a:1,a:2}']) assert.equal(findDuplicateKey(text), undefined, text);
    const deep = `${'{"a":'.repeat(200_000)}1${'}'.repeat(200_000)}`;
    assert.equal(findDuplicateKey(deep), undefined);
    assert.equal(findDuplicateKey(`${'['.repeat(200_000)}{"z":1,"z":2}${']'.repeat(200_000)}`)?.key, 'z');
  });
});
