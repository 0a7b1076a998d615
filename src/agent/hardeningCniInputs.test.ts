// CNI inputs: a netconf without a usable network name,
// and CNI_ARGS IP= asking for what the node can never give, are refused with
// a clear, permanent error and nothing allocated or created. The real agent
// over the fake datapath (no root), called as tendril-cni's relay calls it
// (through the skel's dispatch) and directly (as the deletion queue does).
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { pino } from 'pino';
import { AgentError } from '../api/errors.js';
import type { CniRequest } from '../api/types.js';
import { CniErrorCode } from '../cni/index.js';
import type { FakeDatapath } from '../datapath/fake/fakeDatapath.js';
import { runCniCall } from '../api/server/cniRoute.js';
import type { AgentApi } from '../api/server/server.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

let node: FakeNodeAgent;
let datapath: FakeDatapath;
let api: AgentApi;
let pods = 0;
const silent = pino({ level: 'silent' });

beforeEach(async () => {
  node = await startFakeNodeAgent({ nodeName: 'tdl-hardening-in', podCidr: '10.90.0.0/24' });
  datapath = node.datapath;
  api = node.agent.api();
});

afterEach(() => node.stop());

function newPod(): string {
  const path = `/var/run/netns/tdlhardin${pods++}`;
  datapath.addNetns(path);
  return path;
}

const podAllocations = async () => (await api.ipam.list()).filter((a) => !a.owner.startsWith('tendril:router')).map((a) => `${a.owner}=${a.ip}`);

async function assertNothingMade(): Promise<void> {
  assert.deepEqual(await podAllocations(), [], 'no allocation');
  assert.deepEqual(api.endpoints.list(), [], 'no endpoint');
  assert.deepEqual(await datapath.listPodHostInterfaces(), [], 'no pod interface');
}

function request(command: CniRequest['command'], config: Record<string, unknown>, extra: Partial<CniRequest> = {}): CniRequest {
  const attachment = command === 'ADD' || command === 'DEL' || command === 'CHECK' ? { containerId: 'tdl-in', ifName: 'eth0', netns: extra.netns ?? '/var/run/netns/tdlhardin-none' } : {};
  return { command, path: '/opt/cni/bin', args: '', config: JSON.stringify({ type: 'tendril-cni', ...config }), ...attachment, ...extra };
}

/** What tendril-cni would print and exit with, parsed. */
async function relayed(req: CniRequest): Promise<{ exitCode: number; out: { code?: number; msg?: string; details?: string } }> {
  const { exitCode, output } = await runCniCall(api.cni, req, silent);
  return { exitCode, out: output === '' ? {} : (JSON.parse(output) as { code?: number; msg?: string }) };
}

async function rejectsWithCni(p: Promise<unknown>, code: number, message: RegExp): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof AgentError, String(err));
    assert.equal(err.cniCode, code, err.message);
    assert.ok(err.httpStatus < 500, `a client error, not ${err.httpStatus}`);
    assert.match(`${err.message} ${err.details}`, message);
    return true;
  });
}

describe('the netconf\'s network name', () => {
  const bad: Array<[string, Record<string, unknown>, RegExp]> = [
    ['missing', { cniVersion: '1.1.0' }, /missing network name/],
    ['empty', { cniVersion: '1.1.0', name: '' }, /missing network name/],
    ['a/b', { cniVersion: '1.1.0', name: 'a/b' }, /invalid characters found in network name/],
  ];
  for (const [what, config, message] of bad) {
    test(`${what}: every verb but VERSION answers code 7 through the relay, and the agent refuses it too; nothing is made`, async () => {
      const netns = newPod();
      for (const command of ['ADD', 'CHECK', 'DEL', 'GC', 'STATUS'] as const) {
        const r = await relayed(request(command, config, { netns }));
        assert.equal(r.exitCode, 1, `${command}: ${JSON.stringify(r.out)}`);
        assert.equal(r.out.code, CniErrorCode.InvalidNetworkConfig, `${command}: ${JSON.stringify(r.out)}`);
        assert.match(`${r.out.msg} ${r.out.details ?? ''}`, message);
      }
      await rejectsWithCni(api.cni.handle(request('ADD', config, { netns })), CniErrorCode.InvalidNetworkConfig, message);
      await rejectsWithCni(api.cni.handle(request('DEL', config, { netns })), CniErrorCode.InvalidNetworkConfig, message);
      await assertNothingMade();
    });
  }

  test('a valid name still works', async () => {
    const netns = newPod();
    const r = await relayed(request('ADD', { cniVersion: '1.1.0', name: 'tdl.net_1-a' }, { netns }));
    assert.equal(r.exitCode, 0, JSON.stringify(r.out));
    assert.equal((await relayed(request('DEL', { cniVersion: '1.1.0', name: 'tdl.net_1-a' }, { netns }))).exitCode, 0);
  });
});

describe('CNI_ARGS IP=', () => {
  const add = (ip: string, netns: string, containerId = 'tdl-in') => api.cni.handle(request('ADD', { cniVersion: '1.1.0', name: 'tdlin' }, { netns, containerId, args: `IP=${ip}` }));

  test('an IPv6 address on a node without an IPv6 pool is refused (code 4), not ignored', async () => {
    await rejectsWithCni(add('fd00::5', newPod()), CniErrorCode.InvalidEnvironmentVariables, /fd00::5.*IPv6/);
    await assertNothingMade();
  });

  test('two addresses of one family are refused (code 4), not the second one ignored', async () => {
    await rejectsWithCni(add('10.90.0.5,10.90.0.6', newPod()), CniErrorCode.InvalidEnvironmentVariables, /10\.90\.0\.5.*10\.90\.0\.6|two IPv4/);
    await assertNothingMade();
  });

  for (const [what, ip] of [['router', '10.90.0.1'], ['network', '10.90.0.0'], ['broadcast', '10.90.0.255']] as const) {
    test(`the pool's ${what} address is a permanent refusal (code 4, not 11 "try again")`, async () => {
      await rejectsWithCni(add(ip, newPod()), CniErrorCode.InvalidEnvironmentVariables, new RegExp(`${ip.replace(/\./g, '\\.')}.*(router|reserved|network|broadcast)`));
      await assertNothingMade();
    });
  }

  test('an address outside the pool stays a refusal, and one another pod holds stays "try again" (11): it may be freed', async () => {
    await rejectsWithCni(add('192.0.2.7', newPod()), CniErrorCode.InvalidNetworkConfig, /192\.0\.2\.7/);
    const first = newPod();
    const { result } = await add('10.90.0.40', first, 'tdl-in-a');
    assert.equal(result!.ips![0]!.address, '10.90.0.40/32');
    await rejectsWithCni(add('10.90.0.40', newPod(), 'tdl-in-b'), CniErrorCode.TryAgainLater, /10\.90\.0\.40/);
    await api.cni.handle(request('DEL', { cniVersion: '1.1.0', name: 'tdlin' }, { netns: first, containerId: 'tdl-in-a' }));
    await assertNothingMade();
  });

  test('one address of the node\'s family still works', async () => {
    const netns = newPod();
    const { result } = await add('10.90.0.41', netns);
    assert.equal(result!.ips![0]!.address, '10.90.0.41/32');
  });
});
