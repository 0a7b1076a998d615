// Lost kvstore state under live pods: the agent is killed
// with SIGKILL and the embedded store's write-ahead log deleted, so the store
// forgets every write since its last checkpoint — here, every pod address.
// The agent must re-claim the restored endpoints' addresses: CHECK passes,
// a new pod gets a free address, and nothing is handed out twice.
import assert from 'node:assert/strict';
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { confListFromBytes, type CniRuntime, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import type { Result100 } from '../../src/cni/index.js';
import { AgentProcess, ping as pingFrom, podAllocations as allocationsOf, podHostLinks, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';

requireRoot('the lost-state hardening test');

const pool = new NetnsPool('hs');
let node = '';
let agent: AgentProcess;
let runtime: CniRuntime;
let cleanup = async () => {};

function conflist(): NetworkConfigList {
  return confListFromBytes(JSON.stringify({ cniVersion: '1.1.0', name: 'tdlhstate', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
}
const rt = (containerId: string, netns: string): RuntimeConf => ({ containerId, netns, ifName: 'eth0', args: [] });
const ipOf = (r: Result100) => r.ips![0]!.address.split('/')[0]!;

before(async () => {
  ({ node, agent, runtime, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-hs', args: ['--pod-cidr', '10.243.0.0/24'] }));
});

after(async () => {
  await cleanup();
  await pool.cleanup();
});

describe('kill -9, then the embedded kvstore\'s WAL deleted', () => {
  test('restored endpoints re-claim their addresses; CHECK passes, a new ADD gets a free address, pods keep talking', async () => {
    const a = await pool.add('a');
    const b = await pool.add('b');
    const ra = (await runtime.addNetworkList(conflist(), rt('tdl-hs-a', a.path))) as Result100;
    const rb = (await runtime.addNetworkList(conflist(), rt('tdl-hs-b', b.path))) as Result100;

    await agent.kill();
    const kvdir = join(agent.stateDir, 'lib', 'kvstore');
    const wal = (await readdir(kvdir)).filter((f) => f.endsWith('-wal') || f.endsWith('-shm'));
    assert.ok(wal.includes('tendril.db-wal'), `a killed agent leaves its WAL (found ${wal.join(', ')})`);
    for (const f of wal) await rm(join(kvdir, f));
    await agent.start();

    const held = await allocationsOf(agent);
    assert.ok(held.includes(`tdl-hs-a=${ipOf(ra)}`), `a's address is held for it again: ${held.join(' ')}`);
    assert.ok(held.includes(`tdl-hs-b=${ipOf(rb)}`), `b's address is held for it again: ${held.join(' ')}`);
    assert.match(agent.output, /re-claimed/, 'the agent says it re-claimed addresses');
    await runtime.checkNetworkList(conflist(), rt('tdl-hs-a', a.path));
    await runtime.checkNetworkList(conflist(), rt('tdl-hs-b', b.path));

    const c = await pool.add('c');
    const rc = (await runtime.addNetworkList(conflist(), rt('tdl-hs-c', c.path))) as Result100;
    assert.ok(![ipOf(ra), ipOf(rb)].includes(ipOf(rc)), `c gets a free address, got ${ipOf(rc)}`);
    assert.ok(await pingFrom(pool, c.name, ipOf(ra)), 'c reaches a');
    assert.ok(await pingFrom(pool, a.name, ipOf(rb)), 'a reaches b');

    for (const [id, ns] of [['tdl-hs-a', a.path], ['tdl-hs-b', b.path], ['tdl-hs-c', c.path]] as const) await runtime.delNetworkList(conflist(), rt(id, ns));
    assert.deepEqual(await allocationsOf(agent), []);
    assert.deepEqual(await podHostLinks(pool, node), []);
  });
});

describe('an embedded kvstore that is not a database', () => {
  test('the agent exits 1 with one line naming the file and the fix, on every start', async () => {
    const other = await pool.add('node2');
    const broken = await AgentProcess.create({ nodeNetns: other.name, nodeName: 'tdl-node-hs2', args: ['--pod-cidr', '10.244.0.0/24'] });
    try {
      const db = join(broken.stateDir, 'lib', 'kvstore', 'tendril.db');
      await mkdir(join(broken.stateDir, 'lib', 'kvstore'), { recursive: true });
      await writeFile(db, Buffer.alloc(8192, 0x5a));
      for (let attempt = 0; attempt < 2; attempt++) {
        await assert.rejects(broken.start(), /exited during start-up/);
        assert.equal(await broken.waitExit(), 1);
      }
      const lines = broken.output.split('\n').filter((l) => l !== '');
      assert.equal(lines.length, 2, `one line per start:\n${broken.output}`);
      for (const line of lines) {
        assert.ok(line.startsWith('tendril-agent: failed to start: embedded kvstore at '), line);
        assert.ok(line.includes(db), line);
        assert.match(line, /not a SQLite database.*move it aside.*restore it from a backup/);
      }
    } finally {
      await broken.cleanup();
    }
  });
});
