import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { PolicyParseError } from './errors.js';
import { parsePolicyText } from './ruleParser.js';
import { checkPolicyNesting, MAX_POLICY_NESTING } from './yamlNesting.js';
import { dbFromWebPolicy } from './testing/policies.js';

const refusedForDepth = (err: unknown) => err instanceof PolicyParseError && err.message.includes(`nested deeper than ${MAX_POLICY_NESTING} levels`) && !/call stack/.test(err.message);

describe('policy text nesting', () => {
  const flow = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
  const block = (n: number) => Array.from({ length: n }, (_, i) => `${' '.repeat(i)}k${i}:`).join('\n') + ' 1';

  test('the limit exactly is accepted by the check; one more is refused, flow and block alike', () => {
    checkPolicyNesting(flow(MAX_POLICY_NESTING));
    checkPolicyNesting(block(MAX_POLICY_NESTING));
    assert.throws(() => checkPolicyNesting(flow(MAX_POLICY_NESTING + 1)), refusedForDepth);
    assert.throws(() => checkPolicyNesting(block(MAX_POLICY_NESTING + 1)), refusedForDepth);
  });

  test('a hundred thousand levels: refused naming the limit and the document, never a stack overflow', () => {
    for (const text of [flow(100_000), block(3000), `${'- '.repeat(50_000)}x`, `a: 1\n---\n${flow(100_000)}`]) {
      assert.throws(() => parsePolicyText(text), refusedForDepth);
    }
    assert.throws(() => parsePolicyText(`a: 1\n---\n${flow(1000)}`), (err: unknown) => err instanceof PolicyParseError && err.message.startsWith('document 1 (line 3)'));
  });

  test('real policies pass', () => {
    assert.equal(parsePolicyText(dbFromWebPolicy({ namespace: 'prod', tcpPort: 5432 })).length, 1);
  });
});
