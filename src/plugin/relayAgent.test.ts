// tendril-cni exec'd directly, as a runtime does, against a real agent: the
// CNI protocol the agent runs for it (versions, verbs, required variables,
// prevResult), the deletion queue drained by the agent, and VERSION's
// start-up time beside the reference bridge plugin's.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CniErrorCode } from '../cni/errors.js';
import { type AgentProcess, podAllocations, startSingleNode } from '../../test/support/agentHarness.js';
import { NetnsPool } from '../../test/support/netns.js';
import { requireRoot } from '../../test/support/root.js';
import { run } from '../../test/support/run.js';
import { REFERENCE_PLUGIN_DIR } from '../../test/support/tendrilBin.js';
import { assertCniError, cniEnv, type RelayRun, runRelay } from './testing/runRelay.js';

requireRoot('the tendril-cni relay test against a real agent');

// `make check-native` preloads the sanitizers into node for the kernel addon's
// sake. The agent here, and the tools it runs, are not what this file tests
// (tendril-cni is, in its own ASan build via TENDRIL_CNI_BIN), so they run as
// usual: without the preload, and so with the plain build of the addon.
delete process.env.LD_PRELOAD;
delete process.env.TENDRIL_KERNEL_ADDON;

const pool = new NetnsPool('rl');
let agent: AgentProcess;
let cleanup = async () => {};

before(async () => {
  ({ agent, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-relay', args: ['--pod-cidr', '10.248.0.0/24'] }));
});
after(async () => {
  await cleanup();
  await pool.cleanup();
});

function conf(version: string, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ cniVersion: version, name: 'tdlrelay', type: 'tendril-cni', socket: agent.socket, ...extra });
}

function ok(r: RelayRun): Record<string, unknown> | undefined {
  assert.equal(r.code, 0, `stdout: ${r.stdout} stderr: ${r.stderr}`);
  return r.out;
}

describe('ADD, CHECK and DEL in every supported version', () => {
  for (const version of ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0']) {
    test(`cniVersion ${version}`, async () => {
      const ns = await pool.add(`v${version.replace(/\./g, '')}`);
      const env = (verb: string) => cniEnv(verb, { CNI_CONTAINERID: `tdl-relay-${version.replace(/\./g, '')}`, CNI_NETNS: ns.path });
      const add = await runRelay(env('ADD'), conf(version));
      const result = ok(add) as { cniVersion: string; ips: Array<{ version?: string; address: string; interface: number }>; interfaces: Array<{ name: string; sandbox?: string }> };
      assert.equal(result.cniVersion, version);
      assert.equal(result.ips[0]!.version, version.startsWith('0.') ? '4' : undefined, 'the result is in the config\'s version');
      assert.match(result.ips[0]!.address, /^10\.248\.0\.\d+\/32$/);
      assert.equal(result.interfaces[result.ips[0]!.interface]!.sandbox, ns.path);
      assert.match(add.stdout, /^\{\n {4}"cniVersion"/, 'printed as the skel printed it');

      const withPrev = conf(version, { prevResult: result });
      if (version === '0.3.0' || version === '0.3.1') {
        assertCniError(await runRelay(env('CHECK'), withPrev), CniErrorCode.IncompatibleVersion, /does not allow CHECK/);
      } else {
        assert.equal(ok(await runRelay(env('CHECK'), withPrev)), undefined, 'CHECK prints nothing');
      }
      assert.equal(ok(await runRelay(env('DEL'), withPrev)), undefined, 'DEL prints nothing');
      assert.equal(ok(await runRelay(env('DEL'), withPrev)), undefined, 'DEL is idempotent');
      assert.deepEqual(await podAllocations(agent), []);
    });
  }
});

describe('the agent runs the protocol the skel ran', () => {
  const cases: Array<[string, Record<string, string | undefined>, string, number, RegExp]> = [
    ['ADD without CNI_NETNS', cniEnv('ADD', { CNI_NETNS: undefined }), '1.0.0', CniErrorCode.InvalidEnvironmentVariables, /required env variables \[CNI_NETNS\] missing/],
    ['DEL without CNI_PATH', cniEnv('DEL', { CNI_PATH: '' }), '1.0.0', CniErrorCode.InvalidEnvironmentVariables, /\[CNI_PATH\] missing/],
    ['an interface name too long', cniEnv('ADD', { CNI_IFNAME: 'eth0123456789abc' }), '1.0.0', CniErrorCode.InvalidEnvironmentVariables, /too long/],
    ['a container ID with a slash', cniEnv('ADD', { CNI_CONTAINERID: 'a/b' }), '1.0.0', CniErrorCode.InvalidEnvironmentVariables, /invalid characters in containerID/],
    ['cniVersion 0.2.0', cniEnv('ADD'), '0.2.0', CniErrorCode.IncompatibleVersion, /incompatible CNI versions/],
    ['GC in 1.0.0', cniEnv('GC'), '1.0.0', CniErrorCode.IncompatibleVersion, /does not allow GC/],
    ['STATUS in 0.4.0', cniEnv('STATUS'), '0.4.0', CniErrorCode.IncompatibleVersion, /does not allow STATUS/],
  ];
  for (const [what, env, version, code, msg] of cases) {
    test(`${what}: code ${code}`, async () => {
      assertCniError(await runRelay(env, conf(version)), code, msg);
    });
  }

  test('a prevResult that is not a result: code 6', async () => {
    assertCniError(await runRelay(cniEnv('DEL'), conf('1.0.0', { prevResult: { ips: 'nope' } })), CniErrorCode.DecodingFailure, /could not parse prevResult/);
  });

  test('a config without a type: code 7', async () => {
    assertCniError(await runRelay(cniEnv('ADD'), JSON.stringify({ cniVersion: '1.0.0', name: 'n', socket: agent.socket })), CniErrorCode.InvalidNetworkConfig, /missing network type/);
  });

  test('STATUS in 1.1.0 succeeds and prints nothing', async () => {
    assert.equal(ok(await runRelay(cniEnv('STATUS'), conf('1.1.0'))), undefined);
  });

  test('ADD into a namespace that does not exist: the agent\'s datapath error (102), nothing left behind', async () => {
    assertCniError(await runRelay(cniEnv('ADD', { CNI_CONTAINERID: 'tdl-relay-nons', CNI_NETNS: '/var/run/netns/tdl-relay-missing' }), conf('1.0.0')), 102);
    assert.deepEqual(await podAllocations(agent), []);
  });
});

describe('the deletion queue', () => {
  test('a DEL while the agent is down is queued, and the agent drains it when it starts', async () => {
    const ns = await pool.add('queue');
    const env = (verb: string) => cniEnv(verb, { CNI_CONTAINERID: 'tdl-relay-queued', CNI_NETNS: ns.path });
    ok(await runRelay(env('ADD'), conf('1.1.0')));
    assert.equal((await podAllocations(agent)).length, 1);
    await agent.stop();
    try {
      assertCniError(await runRelay(env('ADD'), conf('1.1.0')), CniErrorCode.TryAgainLater);
      assertCniError(await runRelay(env('STATUS'), conf('1.1.0')), CniErrorCode.PluginNotAvailable);
      assert.equal(ok(await runRelay(env('DEL'), conf('1.1.0'))), undefined);
      const qdir = join(agent.stateDir, 'deletion-queue');
      const queued = await readdir(qdir);
      assert.equal(queued.length, 1);
      const req = JSON.parse(await readFile(join(qdir, queued[0]!), 'utf8')) as Record<string, unknown>;
      assert.equal(req.command, 'DEL');
      assert.equal(req.containerId, 'tdl-relay-queued');
      assert.equal(req.config, conf('1.1.0'));
    } finally {
      await agent.start();
    }
    assert.deepEqual(await readdir(join(agent.stateDir, 'deletion-queue')), [], 'drained on start');
    assert.deepEqual(await agent.client.listEndpoints(), []);
    assert.deepEqual(await podAllocations(agent), []);
  });

  // The race: the stopped agent received the DEL and does it when it runs
  // again; the queued copy is drained at the next start. DEL is idempotent,
  // so the second one finds nothing to do, and a copy older than an endpoint
  // the runtime added again since is dropped rather than deleting it.
  test('a DEL to a stopped (SIGSTOP) agent is queued within seconds and exits 0; done once the agent runs, the copy is harmless', async () => {
    const ns = await pool.add('stopped');
    const env = (verb: string) => cniEnv(verb, { CNI_CONTAINERID: 'tdl-relay-stopped', CNI_NETNS: ns.path });
    ok(await runRelay(env('ADD'), conf('1.1.0')));
    const pid = agent.pid!;
    process.kill(pid, 'SIGSTOP');
    let del: RelayRun;
    try {
      del = await runRelay(env('DEL'), conf('1.1.0'), 20_000);
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    assert.equal(ok(del), undefined);
    assert.ok(del.ms < 12_000, `DEL took ${del.ms} ms`);
    const qdir = join(agent.stateDir, 'deletion-queue');
    assert.equal((await readdir(qdir)).length, 1, 'queued');
    for (let i = 0; (await agent.client.listEndpoints()).length > 0; i++) {
      assert.ok(i < 100, 'the agent did the DEL it had received once it ran again');
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.deepEqual(await podAllocations(agent), []);
    // The runtime adds the same attachment again before the agent restarts.
    ok(await runRelay(env('ADD'), conf('1.1.0')));
    await agent.stop();
    await agent.start();
    assert.deepEqual(await readdir(qdir), [], 'drained on start');
    assert.equal((await agent.client.listEndpoints()).length, 1, 'the stale queued DEL left the new endpoint alone');
    ok(await runRelay(env('DEL'), conf('1.1.0')));
    assert.deepEqual(await podAllocations(agent), []);
  });
});

describe('start-up', () => {
  test('VERSION: 200 execs of tendril-cni and of the reference bridge plugin, answers checked, p50 reported', async (t) => {
    const bridge = join(REFERENCE_PLUGIN_DIR, 'bridge');
    assert.ok(existsSync(bridge), `${bridge} (containernetworking-plugins) is installed`);
    const stdin = JSON.stringify({ cniVersion: '1.0.0', name: 'n', type: 'x' });
    const tendril: number[] = [];
    const reference: number[] = [];
    for (let i = 0; i < 200; i++) {
      // Interleaved, so both see the same machine.
      const r = await runRelay({ CNI_COMMAND: 'VERSION' }, stdin);
      assert.equal(r.out?.cniVersion, '1.0.0');
      tendril.push(r.ms);
      const t0 = performance.now();
      const b = await run([bridge], { env: { CNI_COMMAND: 'VERSION' }, input: stdin });
      reference.push(performance.now() - t0);
      assert.equal(b.code, 0, b.stderr);
    }
    const at = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.floor(q * (xs.length - 1))]!.toFixed(2);
    t.diagnostic(`VERSION over 200 execs, p50 (p99): tendril-cni ${at(tendril, 0.5)} (${at(tendril, 0.99)}) ms, bridge ${at(reference, 0.5)} (${at(reference, 0.99)}) ms`);
  });
});
