// tendril-cni installed as a runtime installs a plugin — copied into a
// fresh directory of its own, nothing of the repository beside it — runs
// ADD and DEL against the agent. (A launcher that found its code relative to
// its own path failed there with MODULE_NOT_FOUND and CNI code 999.)
import assert from 'node:assert/strict';
import { lstat } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Result100 } from '../../src/cni/index.js';
import { CniRuntime, confListFromBytes } from '../../src/libcni/index.js';
import { AgentProcess, tendrilPluginDir } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';

requireRoot('the plugin installed by copy');

const pool = new NetnsPool('pcp');
let agent: AgentProcess | undefined;
let bin: Awaited<ReturnType<typeof tendrilPluginDir>> | undefined;

before(async () => {
  const node = (await pool.add('node')).name;
  agent = await AgentProcess.create({ nodeNetns: node, nodeName: 'tdl-node-pcp', args: ['--pod-cidr', '10.244.77.0/24', '--datapath', 'routing'] });
  await agent.start();
  bin = await tendrilPluginDir();
});

after(async () => {
  await agent?.cleanup();
  await bin?.cleanup();
  await pool.cleanup();
});

test('a copy of bin/tendril-cni in a fresh plugin dir runs ADD and DEL', async () => {
  const plugin = await lstat(join(bin!.dir, 'tendril-cni'));
  assert.ok(plugin.isFile() && !plugin.isSymbolicLink(), 'the plugin dir holds a copy, not a link into the repository');
  const pod = await pool.add('pod');
  const runtime = new CniRuntime({ pluginDirs: [bin!.dir], cacheDir: join(bin!.dir, 'cache') });
  const conflist = confListFromBytes(JSON.stringify({ cniVersion: '1.0.0', name: 'tdlcopy', plugins: [{ type: 'tendril-cni', socket: agent!.socket }] }));
  const rt = { containerId: 'tdl-pcp-copy', netns: pod.path, ifName: 'eth0' };
  const result = (await runtime.addNetworkList(conflist, rt)) as Result100;
  assert.match(result.ips?.[0]?.address ?? '', /^10\.244\.77\.\d+\/32$/);
  assert.equal((await agent!.client.listEndpoints()).length, 1);
  await runtime.delNetworkList(conflist, rt);
  assert.equal((await agent!.client.listEndpoints()).length, 0);
});
