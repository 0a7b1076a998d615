import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { Backend } from '../kvstore/types.js';
import { BlockAllocator } from './blockAllocator.js';
import { ClusterPoolAllocator } from './clusterPool.js';
import { IpamErrorCode, isIpamError } from './errors.js';
import { HostScopeAllocator } from './hostScope.js';
import { embeddedBackend } from './testing/backends.js';
import { quietLogger } from './testing/subjects.js';
import type { Allocator, IpFamily } from './types.js';

// Random sequences of allocate / release / confirm / clock moves / expiry /
// restart against a reference model. After every step the allocator's view
// must equal the model's: no address twice, the router never handed out,
// exhaustion exactly when the model is full (so released addresses are
// reusable), provisional owners gone exactly when their deadline passed.

type Op =
  | { t: 'alloc'; owner: number; family: IpFamily; provisional: boolean }
  | { t: 'allocAll'; owner: number; provisional: boolean }
  | { t: 'release'; owner: number }
  | { t: 'releaseIp'; owner: number }
  | { t: 'confirm'; owner: number }
  | { t: 'advance'; ms: number }
  | { t: 'expire' }
  | { t: 'restart' };

const OWNERS = 12;
const TTL = 1000;

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ t: fc.constant('alloc' as const), owner: fc.nat(OWNERS - 1), family: fc.constantFrom(4 as const, 6 as const), provisional: fc.boolean() }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant('allocAll' as const), owner: fc.nat(OWNERS - 1), provisional: fc.boolean() }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('release' as const), owner: fc.nat(OWNERS - 1) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('releaseIp' as const), owner: fc.nat(OWNERS - 1) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('confirm' as const), owner: fc.nat(OWNERS - 1) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('advance' as const), ms: fc.integer({ min: 100, max: 1500 }) }) },
  { weight: 2, arbitrary: fc.constant({ t: 'expire' as const }) },
  { weight: 1, arbitrary: fc.constant({ t: 'restart' as const }) },
);

interface Mode {
  name: string;
  capacity: Record<IpFamily, number>;
  make: (backend: Backend, now: () => number) => Allocator;
}

const modes: Mode[] = [
  {
    name: 'host-scope',
    // /29: 8 minus network, broadcast, router; /125: 8 minus subnet-router anycast and router.
    capacity: { 4: 5, 6: 6 },
    make: (backend, now) =>
      new HostScopeAllocator({ backend, host: 'p', now, autoExpire: false, podCidrs: [{ cidr: '10.1.0.0/29' }, { cidr: 'fd00:1::/125' }], logger: quietLogger }),
  },
  {
    name: 'cluster-pool',
    capacity: { 4: 5, 6: 6 },
    make: (backend, now) =>
      new ClusterPoolAllocator({ backend, host: 'p', now, autoExpire: false, pools: [{ cidr: '10.2.0.0/29' }, { cidr: 'fd00:2::/125' }], maskSize: { 4: 29, 6: 125 }, logger: quietLogger }),
  },
  {
    name: 'block',
    // Two blocks of two addresses per family (blocks reserve nothing): 4 minus the router.
    // Small enough that random sequences reach exhaustion in nearly every run.
    capacity: { 4: 3, 6: 3 },
    make: (backend, now) =>
      new BlockAllocator({
        backend,
        host: 'p',
        now,
        autoExpire: false,
        pools: [{ cidr: '10.3.0.0/30', blockSize: 31 }, { cidr: 'fd00:3::/126', blockSize: 127 }],
        logger: quietLogger,
      }),
  },
];

interface ModelOwner {
  ips: Partial<Record<IpFamily, string>>;
  deadline?: number;
}

/** How often the interesting branches ran, so a passing property cannot be a vacuous one. */
interface Seen {
  exhausted: number;
  expired: number;
}

async function runSequence(mode: Mode, ops: Op[], seen: Seen): Promise<void> {
  const tb = await embeddedBackend();
  let backend = tb.backend;
  let clock = 1_000_000;
  const now = () => clock;
  let a = mode.make(backend, now);
  await a.start();
  const routers = new Set([a.routerAddress(4)!.ip, a.routerAddress(6)!.ip]);
  const model = new Map<string, ModelOwner>();
  const count = (f: IpFamily) => [...model.values()].filter((m) => m.ips[f] !== undefined).length;
  try {
    for (const op of ops) {
      const owner = 'owner' in op ? `o${op.owner}` : '';
      switch (op.t) {
        case 'alloc': {
          const m = model.get(owner);
          const expectOk = m?.ips[op.family] !== undefined || count(op.family) < mode.capacity[op.family];
          try {
            const got = await a.allocate({ owner, family: op.family, ...(op.provisional ? { expirationMs: TTL } : {}) });
            assert.ok(expectOk, `allocate succeeded although the model says IPv${op.family} is full`);
            assert.ok(!routers.has(got.ip), 'router address handed out');
            if (m?.ips[op.family] !== undefined) assert.equal(got.ip, m.ips[op.family], 'retried allocate changed address');
            const next: ModelOwner = m ?? { ips: {}, ...(op.provisional ? { deadline: clock + TTL } : {}) };
            next.ips[op.family] = got.ip;
            model.set(owner, next);
          } catch (err) {
            if (!isIpamError(err) || err.code !== IpamErrorCode.POOL_EXHAUSTED) throw err;
            assert.ok(!expectOk, `exhausted with ${count(op.family)} of ${mode.capacity[op.family]} used`);
            seen.exhausted += 1;
          }
          break;
        }
        case 'allocAll': {
          // A dual-stack pod: both families or neither (allocateAll takes back what it took).
          const m = model.get(owner);
          const missingFull = ([4, 6] as const).some((f) => m?.ips[f] === undefined && count(f) >= mode.capacity[f]);
          const reqs = ([4, 6] as const).map((family) => ({ owner, family, ...(op.provisional ? { expirationMs: TTL } : {}) }));
          try {
            const got = await a.allocateAll!(reqs);
            assert.ok(!missingFull, 'allocateAll succeeded although the model says a family is full');
            const next: ModelOwner = m ?? { ips: {}, ...(op.provisional ? { deadline: clock + TTL } : {}) };
            for (const g of got) {
              assert.ok(!routers.has(g.ip), 'router address handed out');
              if (m?.ips[g.family] !== undefined) assert.equal(g.ip, m.ips[g.family], 'retried allocateAll changed address');
              next.ips[g.family] = g.ip;
            }
            model.set(owner, next);
          } catch (err) {
            if (!isIpamError(err) || err.code !== IpamErrorCode.POOL_EXHAUSTED) throw err;
            assert.ok(missingFull, `allocateAll exhausted with IPv4 ${count(4)}/${mode.capacity[4]}, IPv6 ${count(6)}/${mode.capacity[6]} used`);
            seen.exhausted += 1;
          }
          break;
        }
        case 'release': {
          const released = await a.releaseOwner(owner);
          assert.equal(released.length, Object.keys(model.get(owner)?.ips ?? {}).length);
          model.delete(owner);
          break;
        }
        case 'releaseIp': {
          const m = model.get(owner);
          const ip = m?.ips[4] ?? m?.ips[6];
          if (m === undefined || ip === undefined) break;
          assert.equal(await a.releaseIp(ip, { owner }), true);
          const fam = m.ips[4] === ip ? 4 : 6;
          delete m.ips[fam];
          if (Object.keys(m.ips).length === 0) model.delete(owner);
          break;
        }
        case 'confirm': {
          const m = model.get(owner);
          assert.equal(await a.confirm(owner), m !== undefined);
          if (m !== undefined) delete m.deadline;
          break;
        }
        case 'advance':
          clock += op.ms;
          break;
        case 'expire': {
          const due = [...model].filter(([, m]) => m.deadline !== undefined && m.deadline <= clock).map(([o]) => o);
          const released = await a.expire();
          seen.expired += released.length;
          assert.deepEqual([...new Set(released.map((r) => r.owner))].sort(), due.sort());
          for (const o of due) model.delete(o);
          break;
        }
        case 'restart': {
          await a.stop();
          await backend.close();
          backend = await tb.reopen();
          a = mode.make(backend, now);
          await a.start();
          // start() sweeps expired allocations too.
          for (const [o, m] of model) if (m.deadline !== undefined && m.deadline <= clock) model.delete(o);
          assert.deepEqual(new Set([a.routerAddress(4)!.ip, a.routerAddress(6)!.ip]), routers, 'router kept');
          break;
        }
      }
      // The allocator's state equals the model's.
      const listed = (await a.list()).filter((x) => !routers.has(x.ip));
      const ips = listed.map((x) => x.ip);
      assert.equal(new Set(ips).size, ips.length, `duplicate address in ${JSON.stringify(ips)}`);
      const expected = [...model].flatMap(([o, m]) => Object.values(m.ips).map((ip) => `${o}=${ip}`)).sort();
      assert.deepEqual(listed.map((x) => `${x.owner}=${x.ip}`).sort(), expected, `after ${JSON.stringify(op)}`);
    }
  } finally {
    await a.stop();
    await backend.close();
    await tb.cleanup();
  }
}

const EXHAUSTING: Op[] = [
  ...Array.from({ length: OWNERS }, (_, owner): Op => ({ t: 'alloc', owner, family: 4, provisional: true })),
  { t: 'advance', ms: 3_600_000 },
  { t: 'expire' },
];

describe('ipam properties', () => {
  for (const mode of modes) {
    it(`${mode.name}: random allocate/release/confirm/expire/restart sequences keep the invariants`, async () => {
      // Counted per mode: one mode's exhaustion must not vouch for another's.
      const seen: Seen = { exhausted: 0, expired: 0 };
      await fc.assert(
        fc.asyncProperty(fc.array(opArb, { minLength: 20, maxLength: 60 }), (ops) => runSequence(mode, ops, seen)),
        // Random sequences reach a full pool only sometimes: one example always does (every
        // owner asks for a provisional IPv4 address, more than any mode's pool holds), then
        // lets the deadlines pass, so the coverage check below can never depend on luck.
        { numRuns: Number(process.env.IPAM_PROPERTY_RUNS ?? 40), examples: [[EXHAUSTING]] },
      );
      assert.ok(seen.exhausted > 0 && seen.expired > 0, `exhaustion and expiry exercised: ${JSON.stringify(seen)}`);
    });
  }
});
