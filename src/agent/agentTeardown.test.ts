// A start that fails late — after the kvstore, IPAM, identities, the ipcache
// sync, policies, services, the node registry and the endpoints are up —
// stops every one of them, as stop() does: nothing of the failed agent keeps
// running (and writing to a kvstore it has closed) once start() has rejected.
// Real parts: the embedded kvstore, IPAM, identities and the API over the
// fake datapath, and a TCP port another listener holds.
import assert from 'node:assert/strict';
import { rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, test } from 'node:test';
import { pino } from 'pino';
import { Agent } from './agent.js';
import { NetnsNodeLock } from './nodeLock.js';
import { startFakeNodeAgent } from './testing/fakeNodeAgent.js';

const EXPIRATION_MS = 2000;

let busy: Server | undefined;
const dirs: string[] = [];
after(async () => {
  await new Promise<void>((resolve) => (busy ? busy.close(() => resolve()) : resolve()));
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

test('a start that fails after the subsystems are up stops all of them: none acts once start() has rejected', async () => {
  // A first agent leaves a provisional address behind: the next start's IPAM arms its expiry timer for it.
  const first = await startFakeNodeAgent({ nodeName: 'tdl-teardown', podCidr: '10.89.0.0/24', ipamExpirationMs: EXPIRATION_MS });
  const dir = dirname(first.config.stateDir);
  dirs.push(dir);
  const { allocation } = await first.agent.api().ipam.allocate({ owner: 'tdl-provisional', family: 4, provisional: true });
  assert.ok(allocation.expiresAt !== undefined, 'the address is provisional');
  await first.agent.stop();

  // The last step before the API socket: the metrics address, which another listener holds.
  busy = createServer();
  await new Promise<void>((resolve) => busy!.listen(0, '127.0.0.1', resolve));
  const port = (busy.address() as { port: number }).port;
  const lines: Array<{ level: number; msg: string; subsys?: string; time: number }> = [];
  const log = pino({ level: 'debug' }, { write: (t: string) => void lines.push(JSON.parse(t) as (typeof lines)[number]) });
  const config = { ...first.config, prometheusServeAddr: `127.0.0.1:${port}` };
  // The metrics server comes after the endpoints are restored: every subsystem before it was running.
  await assert.rejects(Agent.start(config, log, { datapath: first.datapath, nodeLock: new NetnsNodeLock({ name: 'tendril-agent-fake-tdl-teardown' }) }), /cannot serve metrics on .*EADDRINUSE/);
  const rejectedAt = Date.now();

  // Past the provisional address's deadline: an IPAM left running would sweep through the closed kvstore now.
  await sleep(Math.max(0, allocation.expiresAt! - Date.now()) + 1500);
  const afterwards = lines.filter((l) => l.time > rejectedAt && l.level >= 40);
  assert.deepEqual(afterwards.map((l) => `${l.subsys ?? ''}: ${l.msg}`), [], 'nothing of the failed agent ran after start() rejected');
  assert.deepEqual(lines.filter((l) => l.msg === 'rollback step failed').map((l) => l.msg), [], 'every subsystem stopped cleanly');
});
