// GET /v1/identity over the real agent (fake datapath): each identity once.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { AgentClient } from '../client/agentClient.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

let node: FakeNodeAgent;
before(async () => {
  node = await startFakeNodeAgent({ nodeName: 'tdl-identity-list', podCidr: '10.89.0.0/24' });
});
after(() => node.stop());

test('the identity list names every identity once, the reserved ones 0–10 included', async () => {
  const ids = await new AgentClient({ socketPath: node.config.socket, timeoutMs: 10_000 }).listIdentities();
  const numbers = ids.map((i) => i.id);
  assert.deepEqual(numbers, [...new Set(numbers)], `duplicates in ${numbers.join(',')}`);
  for (const reserved of [1, 2]) assert.ok(numbers.includes(reserved), `reserved identity ${reserved} listed`);
  assert.deepEqual(numbers, [...numbers].sort((a, b) => a - b), 'sorted by number');
});
