// Chaos: 200 CNI ADD/DEL operations through the real relay (tendril-cni
// exec'd as a runtime execs it) on a pool of pod namespaces, while the agent
// is killed with SIGKILL at random moments — and at exact ADD steps through
// TENDRIL_FAULT_POINT — and restarted. Then the runtime finishes its pending
// DELs, the provisional allocations expire, GC runs with the attachments the
// runtime holds, and the node must be consistent: every address owned by a
// live endpoint or free, no lxc link without an endpoint, no endpoint
// without its host link and pod side, and exactly the runtime's attachments
// left. TENDRIL_CHAOS_SEED replays the same schedule of operations and kills
// (the timing of a kill against an operation still varies).
import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { type RelayRun, runRelay } from '../../src/plugin/testing/runRelay.js';
import { type AgentProcess, podHostLinks, startSingleNode } from '../support/agentHarness.js';
import { addressesIn, linkExists, NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { seededRandom } from '../support/seededRandom.js';

requireRoot('the chaos test');

const OPERATIONS = 200;
const SLOTS = 12;
const WORKERS = 4;
const EXPIRATION_MS = 1500;
/** The last operations run with the agent left up, so some pods outlive the chaos for the checks. */
const CALM_TAIL = 30;
const FAULT_POINTS = ['after-ipam', 'after-datapath', 'after-endpoint'] as const;
const SEED = Number(process.env.TENDRIL_CHAOS_SEED ?? Date.now() % 2 ** 31);

const random = seededRandom(SEED);
const between = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const pool = new NetnsPool('ch');
let node = '';
let agent: AgentProcess;
let cleanup = async () => {};
const pods: Array<{ name: string; path: string }> = [];

before(async () => {
  ({ node, agent, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-chaos', args: ['--pod-cidr', '10.243.0.0/24', '--ipam-expiration', String(EXPIRATION_MS)] }));
  for (let i = 0; i < SLOTS; i++) pods.push(await pool.add(`p${i}`));
});

after(async () => {
  await cleanup();
  await pool.cleanup();
});

/** What the runtime believes of one pod sandbox: the container attached, or one whose DEL it still owes. */
interface Slot {
  index: number;
  gen: number;
  containerId: string | undefined;
  attached: boolean;
}

interface Tally {
  tried: number;
  ok: number;
  /** Refused while the agent was down or died under the call (CNI code 11, or a DEL queued). */
  agentDown: number;
  /** Failed with another CNI code. */
  otherFailures: Map<string, number>;
}

function netconf(extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ cniVersion: '1.1.0', name: 'tdlchaos', type: 'tendril-cni', socket: agent.socket, ...extra });
}

function relay(command: string, slot: Slot | undefined, config = netconf()): Promise<RelayRun> {
  const env: Record<string, string | undefined> = {
    CNI_COMMAND: command,
    CNI_PATH: '/opt/cni/bin',
    // Bounded, so an agent that stops answering fails the call instead of the test's time.
    TENDRIL_CNI_TIMEOUT_MS: '15000',
  };
  if (slot) {
    Object.assign(env, {
      CNI_CONTAINERID: slot.containerId,
      CNI_NETNS: pods[slot.index]!.path,
      CNI_IFNAME: 'eth0',
      CNI_ARGS: `K8S_POD_NAMESPACE=chaos;K8S_POD_NAME=p${slot.index}-${slot.gen};TENDRIL_LABELS=app=chaos`,
    });
  }
  return runRelay(env, config, 30_000);
}

/**
 * The agent's lifecycle under chaos: it runs for a random while, then is
 * killed with SIGKILL, or dies by itself first when it was started with a
 * fault point armed and an ADD reached that step; it is restarted, armed
 * again some of the time.
 */
class Killer {
  up = true;
  kills = 0;
  faultKills = 0;
  armedStarts = 0;
  /** SIGKILLs sent while an operation was in flight. */
  midOperation = 0;
  /** Log tails of deaths no kill or fault point explains. */
  readonly crashes: string[] = [];
  #armed: string | undefined;
  #stop = false;
  #failure: unknown;
  #done: Promise<void> = Promise.resolve();

  start(): void {
    // Kept, not thrown, until stop(): the test fails there with it.
    this.#done = this.#loop().catch((err: unknown) => {
      this.#failure = err;
    });
  }

  async stop(): Promise<void> {
    this.#stop = true;
    await this.#done;
    if (this.#failure !== undefined) throw this.#failure;
  }

  /**
   * Starts the agent, armed or not. An armed agent may meet an ADD at its step
   * before its health answers, and die during the start: that is a fault-point
   * death, and it is started again plainly.
   */
  async #restart(): Promise<void> {
    if (this.#armed === undefined) {
      await agent.start();
      this.up = true;
      return;
    }
    try {
      await agent.start({ TENDRIL_FAULT_POINT: this.#armed });
      this.up = true;
    } catch (err) {
      if (!/exited during start-up/.test((err as Error).message)) throw err;
      this.faultKills++;
      this.#armed = undefined;
      await agent.start();
      this.up = true;
    }
  }

  async #loop(): Promise<void> {
    while (!this.#stop) {
      const until = Date.now() + between(300, 1500);
      let diedAlone = false;
      while (!this.#stop && !diedAlone && Date.now() < until) {
        diedAlone = await agent.waitExit(100).then(
          () => true,
          () => false,
        );
      }
      if (this.#stop && !diedAlone) break;
      if (!diedAlone && random() < 0.6) {
        // Aim at an operation: wait for one to be in flight, then strike a few milliseconds into it.
        const give = Date.now() + 1000;
        while (inFlight === 0 && Date.now() < give) await sleep(5);
        await sleep(between(0, 40));
      }
      if (!diedAlone && inFlight > 0) this.midOperation++;
      this.up = false;
      if (diedAlone && this.#armed === undefined) this.crashes.push(agent.output.slice(-2000));
      else if (diedAlone) this.faultKills++;
      else {
        await agent.kill();
        this.kills++;
      }
      await sleep(between(0, 250));
      this.#armed = !this.#stop && random() < 0.4 ? FAULT_POINTS[between(0, FAULT_POINTS.length - 1)] : undefined;
      if (this.#armed) this.armedStarts++;
      await this.#restart();
    }
    // Stopped while an armed agent was starting: the calm tail and the checks need a plain one.
    if (this.#armed !== undefined) {
      this.up = false;
      await agent.kill();
      this.kills++;
      this.#armed = undefined;
      await agent.start();
      this.up = true;
    }
  }
}

function record(tally: Tally, verb: string, r: RelayRun, wasUp: boolean): boolean {
  tally.tried++;
  if (r.code === 0) {
    if (verb === 'DEL' && !wasUp) tally.agentDown++;
    else tally.ok++;
    return true;
  }
  const code = typeof r.out?.code === 'number' ? r.out.code : -1;
  if (code === 11) tally.agentDown++;
  else {
    const key = `${verb} code ${code}: ${String(r.out?.msg ?? r.stdout).slice(0, 120)}`;
    tally.otherFailures.set(key, (tally.otherFailures.get(key) ?? 0) + 1);
  }
  return false;
}

/** Operations between their exec and their exit. */
let inFlight = 0;

/** One operation on a slot, as a runtime would do next: DEL what it holds or owes, else ADD a new container. */
async function operate(slot: Slot, tally: Tally, killer: Killer): Promise<void> {
  inFlight++;
  try {
    await operateOnce(slot, tally, killer);
  } finally {
    inFlight--;
  }
}

async function operateOnce(slot: Slot, tally: Tally, killer: Killer): Promise<void> {
  const wasUp = killer.up;
  if (slot.containerId !== undefined) {
    const r = await relay('DEL', slot);
    if (record(tally, 'DEL', r, wasUp)) {
      slot.containerId = undefined;
      slot.attached = false;
    }
    return;
  }
  slot.gen++;
  slot.containerId = `tdl-ch${slot.index}-${slot.gen}`;
  const r = await relay('ADD', slot);
  // A failed ADD leaves a DEL owed: the runtime tears the sandbox down.
  slot.attached = record(tally, 'ADD', r, wasUp);
}

test(`chaos: ${OPERATIONS} ADD/DEL through tendril-cni with the agent killed at random (seed ${SEED})`, async (t) => {
  const t0 = Date.now();
  const slots: Slot[] = pods.map((_, index) => ({ index, gen: 0, containerId: undefined, attached: false }));
  const tally: Tally = { tried: 0, ok: 0, agentDown: 0, otherFailures: new Map() };
  const killer = new Killer();
  killer.start();
  let issued = 0;
  const worker = async (w: number) => {
    const mine = slots.filter((s) => s.index % WORKERS === w);
    while (issued < OPERATIONS) {
      issued++;
      if (issued === OPERATIONS - CALM_TAIL) await killer.stop();
      const down = tally.agentDown;
      await operate(mine[between(0, mine.length - 1)]!, tally, killer);
      // Paced as pods come and go, and backing off while the agent is down, as a runtime does.
      await sleep(tally.agentDown > down ? between(300, 900) : between(150, 700));
    }
  };
  try {
    await Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)));
  } finally {
    await killer.stop();
  }
  const chaosMs = Date.now() - t0;

  // The runtime pays what it owes: DELs of failed ADDs and of DELs that failed, retried until they succeed.
  let settleDels = 0;
  for (const s of slots) {
    for (let attempt = 0; s.containerId !== undefined && !s.attached && attempt < 5; attempt++) {
      settleDels++;
      if ((await relay('DEL', s)).code === 0) s.containerId = undefined;
    }
  }
  await sleep(EXPIRATION_MS + 1500);
  const valid = slots.filter((s) => s.attached).map((s) => ({ containerID: s.containerId!, ifname: 'eth0' }));
  const gc = await relay('GC', undefined, netconf({ 'cni.dev/valid-attachments': valid }));
  assert.equal(gc.code, 0, `GC: ${gc.stdout}\n--- agent log tail ---\n${agent.output.slice(-3000)}`);

  // ---- invariants ----
  const violations: string[] = [];
  let checked = 0;
  const check = (ok: boolean, what: string) => {
    checked++;
    if (!ok) violations.push(what);
  };
  const endpoints = await agent.client.listEndpoints();
  const ipam = await agent.client.listIpam();
  const routers = new Set(ipam.allocations.filter((a) => a.owner.startsWith('tendril:router')).map((a) => a.ip));
  const hostLinks = await podHostLinks(pool, node);
  const byOwner = new Map(endpoints.map((e) => [e.ifName === 'eth0' ? e.containerId : `${e.containerId}:${e.ifName}`, e]));

  for (const a of ipam.allocations) {
    if (routers.has(a.ip)) continue;
    const ep = byOwner.get(a.owner);
    check(ep !== undefined && ep.addresses.some((x) => x.ip === a.ip), `address ${a.ip} is held by ${a.owner}, which is no live endpoint`);
  }
  const allocated = new Set(ipam.allocations.map((a) => `${a.owner}=${a.ip}`));
  for (const ep of endpoints) {
    const owner = ep.ifName === 'eth0' ? ep.containerId : `${ep.containerId}:${ep.ifName}`;
    for (const a of ep.addresses) check(allocated.has(`${owner}=${a.ip}`), `endpoint ${ep.id} (${ep.containerId}) holds ${a.ip}, which IPAM does not give it`);
    check(ep.state === 'ready', `endpoint ${ep.id} (${ep.containerId}) is ${ep.state}`);
    check(hostLinks.includes(ep.hostIfName), `endpoint ${ep.id} (${ep.containerId}) has no host link ${ep.hostIfName}`);
    const pod = pods.find((p) => p.path === ep.netns);
    check(pod !== undefined, `endpoint ${ep.id} (${ep.containerId}) names netns ${ep.netns}, none of the pool's`);
    if (pod) {
      const addrs = await addressesIn(pool, pod.name, ep.ifName);
      check(ep.addresses.every((a) => addrs.includes(`${a.ip}/32`)), `endpoint ${ep.id} (${ep.containerId}): its pod side ${ep.ifName} in ${pod.name} has ${addrs.join(',') || 'no addresses'}, not ${ep.addresses.map((a) => a.ip).join(',')}`);
    }
  }
  const owned = new Set(endpoints.map((e) => e.hostIfName));
  for (const l of hostLinks) check(owned.has(l), `host link ${l} belongs to no endpoint`);
  for (const s of slots) {
    const eps = endpoints.filter((e) => e.netns === pods[s.index]!.path);
    if (s.attached) {
      check(eps.length === 1 && eps[0]!.containerId === s.containerId, `slot ${s.index}: the runtime holds ${s.containerId}, the agent has ${eps.map((e) => e.containerId).join(',') || 'no endpoint'}`);
    } else {
      check(eps.length === 0, `slot ${s.index}: the runtime holds nothing, the agent has endpoints ${eps.map((e) => e.containerId).join(',')}`);
      check(!(await linkExists(pool, pods[s.index]!.name, 'eth0')), `slot ${s.index}: eth0 left in ${pods[s.index]!.name} without an attachment`);
    }
  }
  check(killer.crashes.length === 0, `the agent died by itself ${killer.crashes.length} times:\n${killer.crashes.join('\n---\n')}`);
  const queued = await readdir(join(agent.stateDir, 'deletion-queue')).catch(() => []);
  check(queued.length === 0, `deletion queue not drained: ${queued.join(', ')}`);

  const failures = [...tally.otherFailures].map(([k, n]) => `${n}× ${k}`);
  t.diagnostic(
    `seed ${SEED}: ${tally.tried} operations tried in ${chaosMs} ms (${tally.ok} succeeded, ${tally.agentDown} failed or were queued because the agent was down, ${[...tally.otherFailures.values()].reduce((a, b) => a + b, 0)} failed otherwise), ` +
      `${killer.kills} SIGKILLs (${killer.midOperation} during an operation) and ${killer.faultKills} fault-point deaths (of ${killer.armedStarts} armed starts), ${settleDels} settling DELs; ${endpoints.length} endpoints left; ${checked} invariants checked, ${violations.length} broken`,
  );
  if (failures.length > 0) t.diagnostic(`other failures: ${failures.join(' | ')}`);
  assert.ok(tally.tried >= OPERATIONS, `only ${tally.tried} operations ran`);
  assert.deepEqual(violations, [], `invariants broken (seed ${SEED}):\n${violations.join('\n')}\n--- agent log tail ---\n${agent.output.slice(-3000)}`);
});
