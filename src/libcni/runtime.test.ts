import assert from 'node:assert/strict';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, beforeEach, describe, test } from 'node:test';
import { CniError, CniErrorCode } from '../cni/index.js';
import { makePluginDir, makeScratchDir } from '../../test/support/skelFixture.js';
import { confListFromBytes, type NetworkConfigList } from './conf.js';
import { delegateAdd } from './delegate.js';
import { RawExec } from './exec.js';
import { CniRuntime, type RuntimeConf } from './runtime.js';

interface LoggedCall {
  verb: string;
  stdin: Record<string, unknown>;
  env: Record<string, string>;
}

let pluginDir = '';
let scratch = '';
const cleanups: Array<() => Promise<void>> = [];

before(async () => {
  const p = await makePluginDir(['tdl-first', 'tdl-second']);
  const s = await makeScratchDir();
  pluginDir = p.dir;
  scratch = s.dir;
  cleanups.push(p.cleanup, s.cleanup);
});
after(async () => {
  for (const c of cleanups) await c();
});

let logFile = '';
let runtime: CniRuntime;
let n = 0;
beforeEach(() => {
  n++;
  logFile = join(scratch, `calls-${n}.jsonl`);
  runtime = new CniRuntime({ pluginDirs: ['/nonexistent-dir', pluginDir], cacheDir: join(scratch, `cache-${n}`), exec: new RawExec({ timeoutMs: 30_000 }) });
});

async function calls(): Promise<LoggedCall[]> {
  const text = await readFile(logFile, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as LoggedCall);
}

function list(version: string, plugins: Array<Record<string, unknown>>, extra: Record<string, unknown> = {}): NetworkConfigList {
  return confListFromBytes(JSON.stringify({ cniVersion: version, name: 'tdlnet', plugins: plugins.map((p) => ({ logFile, ...p })), ...extra }));
}

const rt: RuntimeConf = {
  containerId: 'ctr-1',
  netns: '/var/run/netns/none',
  ifName: 'eth0',
  args: [
    ['K8S_POD_NAME', 'web'],
    ['IgnoreUnknown', '1'],
  ],
  capabilityArgs: { portMappings: [{ hostPort: 8080, containerPort: 80, protocol: 'tcp' }], bandwidth: { ingressRate: 1 } },
};

describe('AddNetworkList', () => {
  test('chains prevResult, injects name/version/runtimeConfig, keeps unknown fields, caches the result', async () => {
    const l = list('1.0.0', [
      { type: 'tdl-first', address: '10.99.0.5/24', custom: { keep: true } },
      { type: 'tdl-second', address: '10.99.0.6/24', capabilities: { portMappings: true, other: false } },
    ]);
    const result = await runtime.addNetworkList(l, rt);
    assert.equal(result.cniVersion, '1.0.0');
    assert.deepEqual(
      (result as { ips: Array<{ address: string }> }).ips.map((i) => i.address),
      ['10.99.0.5/24', '10.99.0.6/24'],
    );
    const [first, second] = await calls();
    assert.equal(first?.verb, 'ADD');
    assert.deepEqual(first?.stdin, { type: 'tdl-first', address: '10.99.0.5/24', custom: { keep: true }, logFile, name: 'tdlnet', cniVersion: '1.0.0' });
    assert.equal(first?.env.CNI_ARGS, 'K8S_POD_NAME=web;IgnoreUnknown=1');
    assert.deepEqual((second?.stdin.prevResult as { ips: unknown[] }).ips, [{ address: '10.99.0.5/24', gateway: '10.99.0.1' }]);
    // Only declared, enabled capabilities reach runtimeConfig.
    assert.deepEqual(second?.stdin.runtimeConfig, { portMappings: rt.capabilityArgs?.portMappings });

    const cachePath = runtime.cache.pathFor({ networkName: 'tdlnet', containerId: 'ctr-1', ifName: 'eth0' });
    assert.equal((await stat(cachePath)).mode & 0o777, 0o600);
    assert.equal((await stat(join(runtime.cache.cacheDir, 'results'))).mode & 0o777, 0o700);
    const cached = JSON.parse(await readFile(cachePath, 'utf8')) as Record<string, unknown>;
    assert.equal(cached.kind, 'cniCacheV1');
    assert.deepEqual(cached.cniArgs, rt.args);
    assert.deepEqual(await runtime.getCachedResult(l, rt), result);
  });

  for (const version of ['0.3.1', '0.4.0', '1.0.0', '1.1.0']) {
    test(`a plugin answering 1.1.0 is converted to the list's ${version}`, async () => {
      const result = await runtime.addNetworkList(list(version, [{ type: 'tdl-first' }]), rt);
      assert.equal(result.cniVersion, version);
      const ips = (result as { ips: Array<Record<string, unknown>> }).ips;
      assert.equal(ips[0]?.version, version.startsWith('0.') ? '4' : undefined);
    });
  }

  test('the skel plugin refuses a version it is not asked to speak', async () => {
    await assert.rejects(runtime.addNetworkList(list('0.9.0', [{ type: 'tdl-first' }]), rt), (e: unknown) => e instanceof CniError && e.code === CniErrorCode.IncompatibleVersion);
  });
});

describe('DelNetworkList, CheckNetworkList, GC, STATUS', () => {
  test('DEL runs plugins in reverse with the cached result and removes the cache entry', async () => {
    const l = list('1.0.0', [{ type: 'tdl-first' }, { type: 'tdl-second' }]);
    await runtime.addNetworkList(l, rt);
    await runtime.delNetworkList(l, rt);
    const dels = (await calls()).filter((c) => c.verb === 'DEL');
    assert.deepEqual(dels.map((c) => c.stdin.type), ['tdl-second', 'tdl-first']);
    assert.ok(dels[0]?.stdin.prevResult, 'DEL gets prevResult from the cache');
    assert.equal(await runtime.getCachedResult(l, rt), undefined);
  });

  test('DEL of a 0.3.1 list gets no prevResult', async () => {
    const l = list('0.3.1', [{ type: 'tdl-first' }]);
    await runtime.addNetworkList(l, rt);
    await runtime.delNetworkList(l, rt);
    const del = (await calls()).find((c) => c.verb === 'DEL');
    assert.equal(del?.stdin.prevResult, undefined);
  });

  test('CHECK sends the cached result; disableCheck skips it; below 0.4.0 it is refused', async () => {
    const l = list('1.0.0', [{ type: 'tdl-first' }]);
    await assert.rejects(runtime.checkNetworkList(l, rt), (e: unknown) => e instanceof CniError && e.code === CniErrorCode.UnknownContainer);
    await runtime.addNetworkList(l, rt);
    await runtime.checkNetworkList(l, rt);
    assert.ok((await calls()).find((c) => c.verb === 'CHECK')?.stdin.prevResult);
    await runtime.checkNetworkList(list('1.0.0', [{ type: 'tdl-first', failWith: { code: 100, msg: 'x' } }], { disableCheck: true }), rt);
    await assert.rejects(runtime.checkNetworkList(list('0.3.1', [{ type: 'tdl-first' }]), rt), /does not support the CHECK command/);
  });

  test('GC deletes stale cached attachments, keeps valid ones, then sends GC with the valid list', async () => {
    const l = list('1.1.0', [{ type: 'tdl-first' }]);
    await runtime.addNetworkList(l, { ...rt, containerId: 'live' });
    await runtime.addNetworkList(l, { ...rt, containerId: 'stale' });
    await runtime.gcNetworkList(l, { validAttachments: [{ containerID: 'live', ifname: 'eth0' }] });
    const log = await calls();
    assert.deepEqual(log.filter((c) => c.verb === 'DEL').map((c) => c.env.CNI_CONTAINERID), ['stale']);
    const gc = log.find((c) => c.verb === 'GC');
    assert.deepEqual(gc?.stdin['cni.dev/valid-attachments'], [{ containerID: 'live', ifname: 'eth0' }]);
    assert.ok(await runtime.getCachedResult(l, { ...rt, containerId: 'live' }));
    assert.equal(await runtime.getCachedResult(l, { ...rt, containerId: 'stale' }), undefined);
  });

  test('GC on a 1.0.0 list only synthesises DELs; disableGC does nothing', async () => {
    const l = list('1.0.0', [{ type: 'tdl-first' }]);
    await runtime.addNetworkList(l, rt);
    await runtime.gcNetworkList(list('1.0.0', [{ type: 'tdl-first' }], { disableGC: true }), { validAttachments: [] });
    assert.ok(await runtime.getCachedResult(l, rt));
    await runtime.gcNetworkList(l, { validAttachments: [] });
    const log = await calls();
    assert.equal(log.filter((c) => c.verb === 'GC').length, 0);
    assert.equal(log.filter((c) => c.verb === 'DEL').length, 1);
  });

  test('STATUS reports a plugin that is not ready with its code', async () => {
    await runtime.getStatusNetworkList(list('1.1.0', [{ type: 'tdl-first' }]));
    await assert.rejects(
      runtime.getStatusNetworkList(list('1.1.0', [{ type: 'tdl-first', failWith: { code: 50, msg: 'agent not ready' } }])),
      (e: unknown) => e instanceof CniError && e.code === CniErrorCode.PluginNotAvailable && e.msg === 'agent not ready',
    );
  });

  test('VERSION and ValidateNetworkList read the plugin\'s supported versions', async () => {
    const info = await runtime.getVersionInfo('tdl-first');
    assert.ok(info.supportedVersions.includes('0.1.0') && info.supportedVersions.includes('1.1.0'));
    const caps = await runtime.validateNetworkList(list('1.0.0', [{ type: 'tdl-first', capabilities: { portMappings: true, ips: false } }]));
    assert.deepEqual(caps, ['portMappings']);
    await assert.rejects(runtime.validateNetworkList(list('1.0.0', [{ type: 'tdl-missing' }])), (e: unknown) => e instanceof CniError && e.code === CniErrorCode.PluginNotAvailable);
  });
});

describe('bad input and failing plugins', () => {
  const cases: Array<[string, Record<string, unknown>, number, RegExp]> = [
    ['a plugin error is passed through with its code', { type: 'tdl-first', failWith: { code: 11, msg: 'busy' } }, CniErrorCode.TryAgainLater, /busy/],
    ['a crashing plugin', { type: 'tdl-first', crash: true }, CniErrorCode.Internal, /no error message: exit status 2/],
    ['a plugin printing garbage', { type: 'tdl-first', garbage: true }, CniErrorCode.DecodingFailure, /error parsing its diagnostic message/],
    ['an unknown plugin', { type: 'tdl-nope' }, CniErrorCode.PluginNotAvailable, /failed to find plugin "tdl-nope"/],
    ['a plugin type with a path', { type: '../../bin/sh' }, CniErrorCode.InvalidNetworkConfig, /invalid plugin type/],
  ];
  for (const [name, plugin, code, pattern] of cases) {
    test(name, async () => {
      await assert.rejects(runtime.addNetworkList(list('1.0.0', [plugin]), rt), (e: unknown) => {
        assert.ok(e instanceof CniError, String(e));
        assert.equal(e.code, code);
        assert.match(e.message, pattern);
        return true;
      });
      assert.equal(await runtime.getCachedResult(list('1.0.0', [plugin]), rt), undefined, 'nothing cached after a failed ADD');
    });
  }

  test('a hanging plugin is killed at the timeout', async () => {
    const impatient = new CniRuntime({ pluginDirs: [pluginDir], cacheDir: runtime.cache.cacheDir, exec: new RawExec({ timeoutMs: 1500 }) });
    await assert.rejects(impatient.addNetworkList(list('1.0.0', [{ type: 'tdl-first', hang: true }]), rt), (e: unknown) => {
      assert.ok(e instanceof CniError && e.code === CniErrorCode.TryAgainLater, String(e));
      assert.match(e.message, /timed out/);
      return true;
    });
  });

  const badRt: Array<[string, Partial<RuntimeConf>, RegExp]> = [
    ['an interface name over 15 characters', { ifName: 'eth0123456789012' }, /too long/],
    ['an interface name with a slash', { ifName: 'a/b' }, /contains \/ or :/],
    ['a container ID with a space', { containerId: 'a b' }, /invalid characters in containerID/],
  ];
  test('an empty container ID is an unknown container (code 3)', async () => {
    await assert.rejects(runtime.addNetworkList(list('1.0.0', [{ type: 'tdl-first' }]), { ...rt, containerId: '' }), (e: unknown) => e instanceof CniError && e.code === CniErrorCode.UnknownContainer);
  });

  for (const [name, patch, pattern] of badRt) {
    test(`${name} is refused before any plugin runs`, async () => {
      await assert.rejects(runtime.addNetworkList(list('1.0.0', [{ type: 'tdl-first' }]), { ...rt, ...patch }), (e: unknown) => {
        assert.ok(e instanceof CniError && e.code === CniErrorCode.InvalidEnvironmentVariables, String(e));
        assert.match(e.message, pattern);
        return true;
      });
      assert.deepEqual(await calls(), []);
    });
  }
});

describe('delegation', () => {
  test('delegateAdd runs the delegate with the caller\'s env and converts to the netconf version', async () => {
    const netconf = JSON.stringify({ cniVersion: '0.4.0', name: 'tdlnet', type: 'tdl-second', logFile, address: '10.99.0.9/24' });
    const result = await delegateAdd('tdl-second', netconf, {
      env: { CNI_COMMAND: 'DEL', CNI_PATH: pluginDir, CNI_CONTAINERID: 'c', CNI_NETNS: '/x', CNI_IFNAME: 'eth1', CNI_ARGS: '' },
    });
    assert.equal(result.cniVersion, '0.4.0');
    const [call] = await calls();
    assert.equal(call?.verb, 'ADD', 'the verb is replaced');
    assert.equal(call?.env.CNI_IFNAME, 'eth1');
  });

  test('delegation without CNI_PATH is a bad-environment error', async () => {
    await assert.rejects(delegateAdd('tdl-second', '{"type":"x"}', { env: {} }), (e: unknown) => e instanceof CniError && e.code === CniErrorCode.InvalidEnvironmentVariables);
  });
});

test('a malformed result file in the cache does not break listing', async () => {
  const l = list('1.0.0', [{ type: 'tdl-first' }]);
  await runtime.addNetworkList(l, rt);
  await writeFile(join(runtime.cache.cacheDir, 'results', 'garbage'), 'nope');
  assert.equal((await runtime.cache.list()).length, 1);
});
