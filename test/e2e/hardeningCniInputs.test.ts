// CNI inputs, as a runtime sees it: tendril-cni exec'd
// against a real agent in a node namespace. A netconf without a usable network
// name is code 7 for every verb but VERSION (as Go's skel answers); CNI_ARGS
// IP= that the node can never serve is a permanent refusal, not ignored and
// not "try again". Nothing is allocated or created.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CniErrorCode } from '../../src/cni/index.js';
import { assertCniError, cniEnv, runRelay } from '../../src/plugin/testing/runRelay.js';
import { type AgentProcess, podAllocations, podHostLinks, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';

requireRoot('the CNI inputs e2e test');

const pool = new NetnsPool('hc');
let node = '';
let agent: AgentProcess;
let cleanup = async () => {};

before(async () => {
  ({ node, agent, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-hc', args: ['--pod-cidr', '10.245.0.0/24'] }));
});

after(async () => {
  await cleanup();
  await pool.cleanup();
});

const conf = (fields: Record<string, unknown>) => JSON.stringify({ cniVersion: '1.1.0', type: 'tendril-cni', socket: agent.socket, ...fields });

async function assertNothingMade(): Promise<void> {
  assert.deepEqual(await podAllocations(agent), []);
  assert.deepEqual(await podHostLinks(pool, node), []);
  assert.deepEqual(await agent.client.listEndpoints(), []);
}

describe('the netconf\'s network name', () => {
  for (const [what, fields] of [['missing', {}], ['empty', { name: '' }], ['a/b', { name: 'a/b' }]] as const) {
    test(`${what}: ADD, CHECK, DEL, GC and STATUS exit 1 with code 7`, async () => {
      const p = await pool.add(`n${what.replace('/', '')}`);
      for (const verb of ['ADD', 'CHECK', 'DEL', 'GC', 'STATUS']) {
        assertCniError(await runRelay(cniEnv(verb, { CNI_CONTAINERID: 'tdl-hc-name', CNI_NETNS: p.path }), conf(fields)), CniErrorCode.InvalidNetworkConfig, /network name/);
      }
      await assertNothingMade();
    });
  }
});

describe('CNI_ARGS IP=', () => {
  const add = async (ip: string) => {
    const p = await pool.add(`i${ip.replace(/[.:,]/g, '')}`);
    return runRelay(cniEnv('ADD', { CNI_CONTAINERID: 'tdl-hc-ip', CNI_NETNS: p.path, CNI_ARGS: `IgnoreUnknown=1;IP=${ip}` }), conf({ name: 'tdlhc' }));
  };
  const cases: Array<[string, string, RegExp]> = [
    ['an IPv6 address without an IPv6 pool', 'fd00::5', /fd00::5 is an IPv6 address and this node has no IPv6 pool/],
    ['two IPv4 addresses', '10.245.0.5,10.245.0.6', /2 IPv4 addresses/],
    ['the router address', '10.245.0.1', /router address/],
    ['the network address', '10.245.0.0', /reserved/],
    ['the broadcast address', '10.245.0.255', /reserved/],
  ];
  for (const [what, ip, message] of cases) {
    test(`${what} is refused with code 4, nothing made`, async () => {
      assertCniError(await add(ip), CniErrorCode.InvalidEnvironmentVariables, message);
      await assertNothingMade();
    });
  }
});
