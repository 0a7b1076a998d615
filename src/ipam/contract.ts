import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { prefixContainsIp } from '../netip/index.js';
import { parseCidr, parseIp } from './cidr.js';
import { IpamErrorCode, isIpamError } from './errors.js';
import type { Allocation, Allocator, IpFamily } from './types.js';

/**
 * The behaviour every allocator must show (hono's runTest pattern): each
 * allocator's test file calls runAllocatorContract with a factory, once per
 * kvstore backend where the backend matters.
 */
export interface AllocatorSubject {
  /** Started allocator over empty state. */
  readonly allocator: Allocator;
  /** Stops the allocator, reopens the store and starts a new allocator over the same state (an agent restart). */
  restart(): Promise<Allocator>;
  /** Moves the allocator's clock forward (timers already armed keep their real delay). */
  advance(ms: number): void;
  /** Families the subject is configured with. */
  families: IpFamily[];
  /** IPv4 addresses available to pods in the default pool (router excluded). */
  capacity: number;
  /** Pool name reported on allocations and named by exhaustion errors. */
  pool: string;
  /** The CIDR all IPv4 pod addresses fall in. */
  cidr4: string;
  /** Whether routerAddress() is served (every kvstore mode; not delegated). */
  hasRouter: boolean;
  close(): Promise<void>;
}

export type NewAllocatorSubject = () => Promise<AllocatorSubject>;

export async function rejectsWithIpamCode(p: Promise<unknown>, code: string, messageIncludes?: string): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(isIpamError(err), `expected an IpamError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    if (messageIncludes !== undefined) assert.ok(err.message.includes(messageIncludes), `"${err.message}" should name ${messageIncludes}`);
    return true;
  });
}

async function until(what: string, timeoutMs: number, cond: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(25);
  }
}

function inCidr(ip: string, cidr: string): boolean {
  return prefixContainsIp(parseCidr(cidr), parseIp(ip));
}

export function runAllocatorContract(name: string, newSubject: NewAllocatorSubject): void {
  describe(`ipam contract: ${name}`, () => {
    let s: AllocatorSubject;
    let a: Allocator;
    let n = 0;
    const owner = (): string => `ctr-${process.pid}-${++n}`;

    beforeEach(async () => {
      s = await newSubject();
      a = s.allocator;
    });
    afterEach(async () => {
      await s.close();
    });

    it('allocates an address in the pool with prefix length, gateway and origin', async () => {
      const al = await a.allocate({ owner: owner(), family: 4 });
      assert.equal(al.family, 4);
      assert.ok(inCidr(al.ip, s.cidr4), `${al.ip} in ${s.cidr4}`);
      assert.ok(al.prefixLength > 0 && al.prefixLength <= 32);
      assert.equal(al.pool, s.pool);
      assert.ok(al.cidr.includes('/'));
      if (s.hasRouter) {
        const r = a.routerAddress(4);
        assert.ok(r !== undefined, 'router address allocated at start');
        assert.equal(al.gateway, r.ip);
        assert.notEqual(al.ip, r.ip);
      }
    });

    it('serves every configured family', async () => {
      const o = owner();
      const seen = new Set<string>();
      for (const family of s.families) {
        const al = await a.allocate({ owner: o, family });
        assert.equal(al.family, family);
        assert.equal(parseIp(al.ip).family, family);
        seen.add(al.ip);
        if (s.hasRouter) assert.equal(al.gateway, a.routerAddress(family)?.ip);
      }
      assert.equal(seen.size, s.families.length);
      assert.equal((await a.get(o)).length, s.families.length);
    });

    it('dual-stack: an owner holds one address per family, both go with the owner, and a restart keeps both and both routers', async (t) => {
      if (!(s.families.includes(4) && s.families.includes(6))) {
        t.skip('not configured with both families');
        return;
      }
      const o = owner();
      const v4 = await a.allocate({ owner: o, family: 4 });
      const v6 = await a.allocate({ owner: o, family: 6 });
      assert.deepEqual([v4.family, v6.family, parseIp(v6.ip).family], [4, 6, 6]);
      // A retry per family is the same address, not a second one.
      assert.equal((await a.allocate({ owner: o, family: 6 })).ip, v6.ip);
      const routers = s.hasRouter ? [a.routerAddress(4)!.ip, a.routerAddress(6)!.ip] : [];
      if (s.hasRouter) assert.deepEqual([v4.gateway, v6.gateway], routers, 'each family\'s gateway is that family\'s router');
      a = await s.restart();
      assert.deepEqual((await a.get(o)).map((x) => x.ip).sort(), [v4.ip, v6.ip].sort());
      if (s.hasRouter) assert.deepEqual([a.routerAddress(4)?.ip, a.routerAddress(6)?.ip], routers, 'both routers kept');
      assert.deepEqual((await a.releaseOwner(o)).map((x) => x.ip).sort(), [v4.ip, v6.ip].sort());
      assert.deepEqual(await a.get(o), []);
      // Both are free again: another owner may have them (a given address is taken at once).
      const other = owner();
      assert.equal((await a.allocate({ owner: other, family: 6, ip: v6.ip })).ip, v6.ip);
      assert.equal((await a.allocate({ owner: other, family: 4, ip: v4.ip })).ip, v4.ip);
    });

    it('dual-stack allocateAll: an address of each family at once, the same on a retry; all or none when a family is full', async (t) => {
      if (!(s.families.includes(4) && s.families.includes(6)) || a.allocateAll === undefined) {
        t.skip('not configured with both families, or no allocateAll');
        return;
      }
      const o = owner();
      const before = a.stats().allocations;
      const both = await a.allocateAll([{ owner: o, family: 4, expirationMs: 60_000 }, { owner: o, family: 6, expirationMs: 60_000 }]);
      assert.deepEqual(both.map((x) => x.family), [4, 6]);
      assert.equal(a.stats().allocations - before, 2);
      if (s.hasRouter) assert.deepEqual(both.map((x) => x.gateway), [a.routerAddress(4)!.ip, a.routerAddress(6)!.ip]);
      assert.ok(both.every((x) => x.expiresAt !== undefined), 'provisional, as asked');
      const again = await a.allocateAll([{ owner: o, family: 4, expirationMs: 60_000 }, { owner: o, family: 6, expirationMs: 60_000 }]);
      assert.deepEqual(again.map((x) => x.ip), both.map((x) => x.ip), 'a retried ADD keeps its addresses');
      assert.equal((await a.get(o)).length, 2);
      assert.equal(await a.confirm(o), true);
      // Use up IPv6, then a pod asking for both families gets neither.
      for (let i = 0; ; i++) {
        assert.ok(i < 600, 'the IPv6 pool never filled up');
        try {
          await a.allocate({ owner: owner(), family: 6 });
        } catch (err) {
          assert.ok(isIpamError(err) && err.code === IpamErrorCode.POOL_EXHAUSTED, String(err));
          break;
        }
      }
      const v4Before = (await a.list()).filter((x) => x.family === 4).length;
      const late = owner();
      await rejectsWithIpamCode(a.allocateAll([{ owner: late, family: 4 }, { owner: late, family: 6 }]), IpamErrorCode.POOL_EXHAUSTED);
      assert.deepEqual(await a.get(late), [], 'no address of either family stays with the owner');
      assert.equal((await a.list()).filter((x) => x.family === 4).length, v4Before, 'the IPv4 address taken first went back');
    });

    it('allocates a given address once: in use is IPAM_IP_IN_USE, outside the pool is invalid', async () => {
      if (!s.hasRouter) {
        // Delegated IPAM: the plugin chooses every address.
        await rejectsWithIpamCode(a.allocate({ owner: owner(), family: 4, ip: '10.0.0.9' }), 'IPAM_INVALID_ARGUMENT');
        return;
      }
      // Take one address, release it, and ask for exactly that one: free again, so it must be granted.
      const probe = await a.allocate({ owner: owner(), family: 4 });
      await a.releaseOwner(probe.owner);
      const o = owner();
      const got = await a.allocate({ owner: o, family: 4, ip: probe.ip });
      assert.equal(got.ip, probe.ip);
      assert.equal(got.prefixLength, probe.prefixLength);
      assert.equal((await a.allocate({ owner: o, family: 4, ip: probe.ip })).ip, probe.ip, 'a retry gets it again');
      await rejectsWithIpamCode(a.allocate({ owner: owner(), family: 4, ip: probe.ip }), 'IPAM_IP_IN_USE');
      await rejectsWithIpamCode(a.allocate({ owner: owner(), family: 4, ip: a.routerAddress(4)!.ip }), 'IPAM_IP_IN_USE');
      await rejectsWithIpamCode(a.allocate({ owner: owner(), family: 4, ip: '192.0.2.1' }), 'IPAM_INVALID_ARGUMENT');
      await rejectsWithIpamCode(a.allocate({ owner: owner(), family: 4, ip: 'not-an-ip' }), 'IPAM_INVALID_ARGUMENT');
    });

    it('gives a retried allocate for the same owner and family the same address', async () => {
      const o = owner();
      const first = await a.allocate({ owner: o, family: 4 });
      const again = await a.allocate({ owner: o, family: 4 });
      assert.equal(again.ip, first.ip);
      assert.equal((await a.get(o)).length, 1);
    });

    it('gives distinct owners distinct addresses, router included', async () => {
      const ips = new Set<string>();
      if (s.hasRouter) ips.add(a.routerAddress(4)!.ip);
      const count = Math.min(8, s.capacity);
      for (let i = 0; i < count; i++) ips.add((await a.allocate({ owner: owner(), family: 4 })).ip);
      assert.equal(ips.size, count + (s.hasRouter ? 1 : 0));
    });

    it('releases by owner, idempotently, and an unknown owner is not an error', async () => {
      const o = owner();
      const al = await a.allocate({ owner: o, family: 4 });
      const released = await a.releaseOwner(o);
      assert.deepEqual(released.map((x) => x.ip), [al.ip]);
      assert.deepEqual(await a.get(o), []);
      assert.deepEqual(await a.releaseOwner(o), []);
      assert.deepEqual(await a.releaseOwner('never-seen'), []);
      assert.ok(!(await a.list()).some((x) => x.ip === al.ip));
    });

    it('releases by IP, honouring the owner guard', async () => {
      const o = owner();
      const al = await a.allocate({ owner: o, family: 4 });
      assert.equal(await a.releaseIp(al.ip, { owner: 'someone-else' }), false);
      assert.equal((await a.get(o)).length, 1);
      assert.equal(await a.releaseIp(al.ip, { owner: o }), true);
      assert.equal(await a.releaseIp(al.ip), false);
      assert.deepEqual(await a.get(o), []);
    });

    it('fails with IPAM_POOL_EXHAUSTED naming the pool, and a released address is reusable', async () => {
      const held: Allocation[] = [];
      for (let i = 0; i < s.capacity; i++) held.push(await a.allocate({ owner: owner(), family: 4 }));
      assert.equal(new Set(held.map((h) => h.ip)).size, s.capacity);
      await rejectsWithIpamCode(a.allocate({ owner: owner(), family: 4 }), IpamErrorCode.POOL_EXHAUSTED, s.pool);
      const victim = held[Math.floor(held.length / 2)]!;
      await a.releaseOwner(victim.owner);
      const again = await a.allocate({ owner: owner(), family: 4 });
      assert.equal(again.ip, victim.ip);
    });

    it('rejects a bad owner and an unknown pool with stable codes', async () => {
      await rejectsWithIpamCode(a.allocate({ owner: '../etc', family: 4 }), IpamErrorCode.INVALID_ARGUMENT);
      await rejectsWithIpamCode(a.allocate({ owner: owner(), family: 4, pool: 'no-such-pool' }), IpamErrorCode.UNKNOWN_POOL, 'no-such-pool');
    });

    it('keeps a confirmed provisional allocation past its deadline', async () => {
      const o = owner();
      const al = await a.allocate({ owner: o, family: 4, expirationMs: 60_000 });
      assert.ok(al.expiresAt !== undefined);
      assert.equal(await a.confirm(o), true);
      s.advance(120_000);
      assert.deepEqual(await a.expire(), []);
      const got = await a.get(o);
      assert.equal(got.length, 1);
      assert.equal(got[0]!.expiresAt, undefined);
      assert.equal(await a.confirm('never-seen'), false);
    });

    it('releases an unconfirmed provisional allocation by itself, and the address is reusable', async () => {
      const o = owner();
      const al = await a.allocate({ owner: o, family: 4, expirationMs: 150 });
      // The store changes before the sweep counts it: wait for both.
      await until('expiry', 5000, async () => (await a.get(o)).length === 0 && a.stats().expired >= 1);
      assert.equal(await a.releaseIp(al.ip), false);
      // Fill the pool: the expired address must be among those handed out again.
      const ips = new Set<string>();
      for (let i = 0; i < s.capacity; i++) ips.add((await a.allocate({ owner: owner(), family: 4 })).ip);
      assert.ok(ips.has(al.ip));
    });

    it('expires a provisional allocation across an agent restart (the deadline is persisted)', async () => {
      const o = owner();
      const kept = owner();
      await a.allocate({ owner: o, family: 4, expirationMs: 60_000 });
      await a.allocate({ owner: kept, family: 4, expirationMs: 60_000 });
      await a.confirm(kept);
      a = await s.restart();
      assert.equal((await a.get(o)).length, 1, 'still held right after the restart');
      s.advance(61_000);
      // The agent comes back after the deadline: start() releases what expired while it was down.
      a = await s.restart();
      assert.deepEqual(await a.get(o), []);
      assert.equal((await a.get(kept)).length, 1, 'a confirmed allocation survives');
    });

    it('keeps allocations across a restart and never hands them out again', async () => {
      const kept = await a.allocate({ owner: owner(), family: 4 });
      const router = a.routerAddress(4)?.ip;
      a = await s.restart();
      assert.deepEqual((await a.get(kept.owner)).map((x) => x.ip), [kept.ip]);
      if (s.hasRouter) assert.equal(a.routerAddress(4)?.ip, router, 'router address kept');
      const ips = new Set<string>();
      for (let i = 0; i < s.capacity - 1; i++) ips.add((await a.allocate({ owner: owner(), family: 4 })).ip);
      assert.ok(!ips.has(kept.ip));
      if (router !== undefined) assert.ok(!ips.has(router));
    });

    it('GC releases only owners that are gone, never a live one or an ADD in flight', async () => {
      const live = await a.allocate({ owner: owner(), family: 4 });
      const gone = await a.allocate({ owner: owner(), family: 4 });
      const inFlight = await a.allocate({ owner: owner(), family: 4, expirationMs: 60_000 });
      const dry = await a.gc(new Set([live.owner]), { dryRun: true });
      assert.deepEqual(dry.stale.map((x) => x.owner), [gone.owner]);
      assert.deepEqual(dry.released, []);
      assert.equal((await a.get(gone.owner)).length, 1, 'dry run releases nothing');
      const report = await a.gc(new Set([live.owner]));
      assert.deepEqual(report.released.map((x) => x.ip), [gone.ip]);
      assert.equal(report.liveWithAddresses, 1);
      assert.equal((await a.get(live.owner)).length, 1);
      assert.equal((await a.get(inFlight.owner)).length, 1);
      assert.deepEqual(await a.get(gone.owner), []);
      if (s.hasRouter) assert.ok((await a.list()).some((x) => x.ip === a.routerAddress(4)!.ip), 'router survives GC');
    });

    it('lists what it holds and counts operations in stats()', async () => {
      const o = owner();
      const before = a.stats();
      await a.allocate({ owner: o, family: 4 });
      const mine = (await a.list()).filter((x) => x.owner === o);
      assert.equal(mine.length, 1);
      await a.releaseOwner(o);
      const st = a.stats();
      assert.equal(st.allocations - before.allocations, 1, 'one allocation counted');
      assert.equal(st.releases - before.releases, 1, 'one release counted');
      assert.equal(st.casGiveUps, before.casGiveUps, 'nothing gave up without contention');
    });
  });
}
