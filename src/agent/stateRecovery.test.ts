// Lost or corrupted state on the node, over the fake
// datapath: a real agent is stopped, its state dir or kvstore damaged, and a
// new one started on what is left. Pods must stay online and the agent must
// say what it found.
import assert from 'node:assert/strict';
import { mkdir, readdir, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { pino } from 'pino';
import type { CniRequest } from '../api/types.js';
import type { Result100 } from '../cni/index.js';
import { KvstoreError } from '../kvstore/errors.js';
import { openBackend } from '../kvstore/factory.js';
import { defaultEmbeddedPath } from '../kvstore/embedded/embeddedOptions.js';
import { createLogger, type Logger } from '../logging/logger.js';
import { Agent } from './agent.js';
import { IpamProvider } from '../ipam/index.js';
import { NetnsNodeLock } from './nodeLock.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

const CONF = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlstate', type: 'tendril-cni' });

interface LogLine {
  level: number;
  msg: string;
  [k: string]: unknown;
}

/** A logger whose lines the test reads back (warn = 40, error = 50). */
function capturingLogger(): { logger: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s) as LogLine) });
  return { logger, lines };
}

let node: FakeNodeAgent | undefined;
let pods = 0;

beforeEach(async () => {
  node = await startFakeNodeAgent({ nodeName: 'tdl-state-unit', podCidr: '10.89.0.0/24' });
});

afterEach(async () => {
  await node?.stop();
  node = undefined;
});

function current(): FakeNodeAgent {
  assert.ok(node, 'an agent is running');
  return node;
}

function newPod(): string {
  const path = `/var/run/netns/tdlstateunit${pods++}`;
  current().datapath.addNetns(path);
  return path;
}

function cni(command: CniRequest['command'], containerId: string, netns: string): Promise<{ result?: Result100 }> {
  return current().agent.api().cni.handle({ command, containerId, netns, ifName: 'eth0', args: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${containerId}`, config: CONF });
}

async function addPod(containerId: string): Promise<{ netns: string; ip: string; id: number; hostIfName: string }> {
  const netns = newPod();
  const { result } = await cni('ADD', containerId, netns);
  const ip = result!.ips![0]!.address.split('/')[0]!;
  const ep = current().agent.api().endpoints.lookup(`container-id:${containerId}`)!;
  return { netns, ip, id: ep.id, hostIfName: ep.hostIfName };
}

/** Restarts the agent after `damage`, with a logger the test reads. */
async function restartAfter(damage: () => Promise<void>): Promise<LogLine[]> {
  const { logger, lines } = capturingLogger();
  try {
    node = await current().restart(damage, { logger });
  } catch (err) {
    node = undefined;
    throw err;
  }
  return lines;
}

const endpointsDir = () => join(current().config.stateDir, 'endpoints');
const dbPath = () => defaultEmbeddedPath(current().config.libDir);
const owners = async () => new Map((await current().agent.api().ipam.list()).map((a) => [a.ip, a.owner]));
const problems = (lines: LogLine[]) => lines.filter((l) => l.level >= 50);

async function removeDb(): Promise<void> {
  const path = dbPath();
  for (const f of [path, `${path}-wal`, `${path}-shm`]) await rm(f, { force: true });
}

describe('IPAM lost while endpoints survived (kvstore db or WAL gone)', () => {
  test('restored endpoints re-claim their addresses: CHECK passes, a new ADD gets another address, one warning says so', async () => {
    const a = await addPod('tdl-rc-a');
    const b = await addPod('tdl-rc-b');
    const lines = await restartAfter(removeDb);
    const held = await owners();
    assert.equal(held.get(a.ip), 'tdl-rc-a', 'a\'s address re-claimed for it');
    assert.equal(held.get(b.ip), 'tdl-rc-b', 'b\'s address re-claimed for it');
    for (const ip of [a.ip, b.ip]) {
      const alloc = (await current().agent.api().ipam.list()).find((x) => x.ip === ip)!;
      assert.equal(alloc.expiresAt, undefined, 'a re-claimed address is permanent');
    }
    await cni('CHECK', 'tdl-rc-a', a.netns);
    await cni('CHECK', 'tdl-rc-b', b.netns);
    const c = await addPod('tdl-rc-c');
    assert.ok(![a.ip, b.ip].includes(c.ip), `a new pod gets a free address, got ${c.ip}`);
    const warned = lines.filter((l) => l.level === 40 && /re-claimed/.test(l.msg));
    assert.equal(warned.length, 1, JSON.stringify(lines.map((l) => l.msg)));
    assert.deepEqual(problems(lines), []);
    assert.equal(current().agent.api().endpoints.lookup('container-id:tdl-rc-a')?.state, 'ready');
  });

  test('an address IPAM now gives someone else: the record is quarantined with one error naming it, the address and its owner; its interface stays', async () => {
    const a = await addPod('tdl-cf-a');
    const lines = await restartAfter(async () => {
      await removeDb();
      // What an old backup might hold: a's address belongs to another owner.
      const cfg = current().config;
      const log = createLogger('tdl-state-unit', 'silent');
      const backend = await openBackend({ kind: cfg.kvstore, options: cfg.kvstoreOpts, dataDir: cfg.libDir, logger: log });
      const ipam = new IpamProvider(cfg, backend, log);
      try {
        await ipam.start();
        await ipam.allocateDirect({ owner: 'tdl-someone-else', family: 4, ip: a.ip, provisional: false });
      } finally {
        await ipam.stop();
        await backend.close();
      }
    });
    assert.equal((await owners()).get(a.ip), 'tdl-someone-else', 'the other owner keeps the address');
    assert.equal(current().agent.api().endpoints.lookup('container-id:tdl-cf-a'), undefined, 'nothing of the record is in force');
    assert.ok((await current().datapath.listPodHostInterfaces()).includes(a.hostIfName), 'the pod keeps its interface');
    const loud = problems(lines).filter((l) => /cannot be trusted/.test(l.msg));
    assert.equal(loud.length, 1, JSON.stringify(lines.map((l) => l.msg)));
    for (const part of [join(endpointsDir(), String(a.id), 'endpoint.json'), `endpoint ${a.id}`, a.ip, 'tdl-someone-else']) assert.ok(loud[0]!.msg.includes(part), `${loud[0]!.msg} names ${part}`);
    assert.equal((await current().agent.api().health.health()).quarantinedEndpoints, 1);
    // DEL frees what is the pod's and nothing of the other owner's.
    await cni('DEL', 'tdl-cf-a', a.netns);
    assert.equal((await owners()).get(a.ip), 'tdl-someone-else');
    assert.ok(!(await current().datapath.listPodHostInterfaces()).includes(a.hostIfName));
  });
});

describe('a record whose interface index is not its interface\'s', () => {
  test('the kernel\'s index and MAC are put in force, never the record\'s, with a warning', async () => {
    const a = await addPod('tdl-ix-a');
    const real = current().datapath.endpointState(a.id)!;
    const file = join(endpointsDir(), String(a.id), 'endpoint.json');
    const syncs = current().datapath.syncs.length;
    const lines = await restartAfter(async () => {
      const record = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
      // Index 1 is the node's loopback on a real node: what an edited record could aim programs at.
      await writeFile(file, JSON.stringify({ ...record, hostIfIndex: 1, hostMac: '02:00:00:00:00:01' }));
    });
    const after = current().datapath.syncs.slice(syncs).filter((st) => st.id === a.id);
    assert.ok(after.length > 0);
    for (const st of after) assert.deepEqual([st.hostIfIndex, st.hostMac], [real.hostIfIndex, real.hostMac]);
    assert.equal(current().agent.api().endpoints.lookup(String(a.id))?.hostIfIndex, real.hostIfIndex);
    assert.equal(lines.filter((l) => l.level === 40 && /the kernel's are used/.test(l.msg)).length, 1);
  });
});

describe('a record whose address belongs to another pod', () => {
  test('the record is quarantined with one error naming it, the address and its owner; the agent starts and serves every other pod', async () => {
    const a = await addPod('tdl-own-a');
    const b = await addPod('tdl-own-b');
    const c = await addPod('tdl-own-c');
    const file = join(endpointsDir(), String(a.id), 'endpoint.json');
    const lines = await restartAfter(async () => {
      const record = JSON.parse(await readFile(file, 'utf8')) as { addresses: Array<{ ip: string }> };
      record.addresses[0]!.ip = b.ip;
      await writeFile(file, JSON.stringify(record));
    });
    const loud = problems(lines);
    assert.equal(loud.length, 1, JSON.stringify(loud.map((l) => l.msg)));
    for (const part of [file, `endpoint ${a.id}`, b.ip, 'tdl-own-b']) assert.ok(loud[0]!.msg.includes(part), `${loud[0]!.msg} names ${part}`);
    assert.equal(current().agent.api().endpoints.lookup('container-id:tdl-own-a'), undefined);
    for (const [id, p] of [['tdl-own-b', b], ['tdl-own-c', c]] as const) {
      assert.equal(current().agent.api().endpoints.lookup(`container-id:${id}`)?.state, 'ready', id);
      await cni('CHECK', id, p.netns);
    }
    assert.equal((await owners()).get(b.ip), 'tdl-own-b');
    assert.equal((await owners()).get(a.ip), 'tdl-own-a', 'a keeps the address IPAM holds for it');
    assert.ok((await current().datapath.listPodHostInterfaces()).includes(a.hostIfName), 'a\'s pod keeps its interface');
    const d = await addPod('tdl-own-d');
    assert.ok(![a.ip, b.ip, c.ip].includes(d.ip), `a new pod gets a free address, got ${d.ip}`);
    const moved = await readdir(join(endpointsDir(), '.quarantine'));
    assert.equal(moved.length, 1);
    assert.match(await readFile(join(endpointsDir(), '.quarantine', moved[0]!, 'reason.txt'), 'utf8'), new RegExp(`${b.ip.replace(/\./g, '\\.')}.*tdl-own-b`));
    // The next start has nothing more to say.
    const again = await restartAfter(async () => {});
    assert.deepEqual(problems(again), []);
  });
});

describe('an unreadable endpoint record', () => {
  for (const [what, damage] of [
    ['truncated', (file: string) => readFile(file, 'utf8').then((t) => truncate(file, Math.floor(t.length / 2)))],
    ['empty', (file: string) => truncate(file, 0)],
  ] as const) {
    test(`${what}: the record is quarantined, the pod keeps its interface and address, one log line, not again on the next start`, async () => {
      const a = await addPod('tdl-q-a');
      const b = await addPod('tdl-q-b');
      const lines = await restartAfter(() => damage(join(endpointsDir(), String(a.id), 'endpoint.json')));
      assert.ok((await current().datapath.listPodHostInterfaces()).includes(a.hostIfName), 'the quarantined pod keeps its interface');
      assert.ok((await current().datapath.listPodHostInterfaces()).includes(b.hostIfName));
      assert.equal((await owners()).get(a.ip), 'tdl-q-a', 'the quarantined pod keeps its address');
      await assert.rejects(stat(join(endpointsDir(), String(a.id))), 'the record is no longer where restore reads');
      const moved = await readdir(join(endpointsDir(), '.quarantine'));
      assert.equal(moved.length, 1);
      assert.match(moved[0]!, new RegExp(`^${a.id}-`));
      const said = lines.filter((l) => /quarantine/.test(l.msg));
      assert.equal(said.length, 1, JSON.stringify(lines.map((l) => l.msg)));
      assert.equal(current().agent.api().endpoints.lookup('container-id:tdl-q-b')?.state, 'ready');
      const health = await current().agent.api().health.health();
      assert.equal(health.quarantinedEndpoints, 1);

      const again = await restartAfter(async () => {});
      assert.deepEqual(again.filter((l) => l.level >= 40), [], 'nothing to say on the next start');
      assert.ok((await current().datapath.listPodHostInterfaces()).includes(a.hostIfName));
      // The runtime's DEL still cleans the pod up.
      await cni('DEL', 'tdl-q-a', a.netns);
      assert.ok(!(await current().datapath.listPodHostInterfaces()).includes(a.hostIfName));
      assert.equal((await owners()).get(a.ip), undefined);
    });
  }
});

describe('leftovers of an interrupted write', () => {
  test('endpoint.json.tmp files are removed quietly; a directory with nothing committed goes', async () => {
    const a = await addPod('tdl-tmp-a');
    const lines = await restartAfter(async () => {
      await writeFile(join(endpointsDir(), String(a.id), 'endpoint.json.tmp'), '{"id": 1, "contai');
      await mkdir(join(endpointsDir(), '77'));
      await writeFile(join(endpointsDir(), '77', 'endpoint.json.tmp'), '{');
      await mkdir(join(endpointsDir(), '78'));
    });
    assert.deepEqual(lines.filter((l) => l.level >= 40), []);
    assert.deepEqual((await readdir(endpointsDir())).filter((n) => !n.startsWith('.')).sort(), [String(a.id)]);
    assert.deepEqual(await readdir(join(endpointsDir(), String(a.id))), ['endpoint.json']);
    assert.equal(current().agent.api().endpoints.lookup('container-id:tdl-tmp-a')?.state, 'ready');
  });
});

describe('a kvstore that cannot open', () => {
  for (const [what, damage] of [
    ['garbage in the db file', async (path: string) => writeFile(path, Buffer.alloc(8192, 0x5a))],
    ['a directory at the db path', async (path: string) => mkdir(path)],
  ] as const) {
    test(`${what}: start fails with a one-line diagnosis naming the path and the fix`, async () => {
      const old = current();
      const { config } = old;
      await old.agent.stop();
      node = undefined;
      const path = defaultEmbeddedPath(config.libDir);
      for (const f of [path, `${path}-wal`, `${path}-shm`]) await rm(f, { force: true });
      await damage(path);
      try {
        await assert.rejects(Agent.start(config, createLogger('tdl-state-unit', 'silent'), { datapath: old.datapath, nodeLock: new NetnsNodeLock({ name: 'tendril-agent-fake-tdl-state-unit-corrupt' }) }), (err: unknown) => {
          assert.ok(err instanceof KvstoreError, String(err));
          assert.equal(err.code, 'KVSTORE_CORRUPT');
          assert.ok(!err.message.includes('\n'), 'one line');
          assert.ok(err.message.includes(path), err.message);
          assert.match(err.message, /not a SQLite database/);
          assert.match(err.message, /move it aside.*empty store.*restore it from a backup/);
          return true;
        });
      } finally {
        await rm(join(config.stateDir, '..'), { recursive: true, force: true });
      }
    });
  }
});
