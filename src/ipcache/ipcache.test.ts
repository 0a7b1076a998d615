import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { formatIp, ipFromBigInt, prefixContainsIp, prefixOf } from '../netip/index.js';
import { IPCache, IpcacheError, IpcacheErrorCode, PrefixMap, sourcePriority, type IpcacheEntry, type IpcacheSource } from './index.js';

const local = (owner: string) => ({ source: 'local' as const, owner });
const kv = (node: string) => ({ source: 'kvstore' as const, owner: `node:${node}` });

describe('IPCache', () => {
  test('longest-prefix match over hosts and CIDRs, IPv4 and IPv6', () => {
    const c = new IPCache();
    c.upsert('0.0.0.0/0', { ...local('world'), identity: 2 });
    c.upsert('10.0.0.0/8', { ...local('cidr'), identity: 16777217 });
    c.upsert('10.1.0.0/16', { ...kv('b'), identity: 300, hostIP: '192.168.0.2' });
    c.upsert('10.1.2.3', { ...local('endpoint:1'), identity: 400 });
    c.upsert('fd00::/64', { ...kv('b'), identity: 500, hostIP: 'fd00::2' });
    assert.equal(c.lookup('10.1.2.3')?.identity, 400);
    assert.equal(c.lookup('10.1.2.4')?.identity, 300);
    assert.equal(c.lookup('10.2.0.1')?.identity, 16777217);
    assert.equal(c.lookup('8.8.8.8')?.identity, 2);
    assert.equal(c.lookup('fd00::1234')?.hostIP, 'fd00::2');
    assert.equal(c.lookup('fd01::1'), undefined);
    assert.equal(c.get('10.1.2.3/32')?.prefix, '10.1.2.3/32');
    assert.equal(c.lookup('not-an-ip'), undefined);
  });

  test('a stale delete does not wipe a reused IP (Cilium #19958)', () => {
    const c = new IPCache();
    c.upsert('10.0.0.5', { ...local('endpoint:1'), identity: 300 });
    // The address is reused by another endpoint before the first one's delete arrives.
    c.upsert('10.0.0.5', { ...local('endpoint:2'), identity: 301 });
    assert.equal(c.delete('10.0.0.5', local('endpoint:1')), 'owner-mismatch');
    assert.equal(c.lookup('10.0.0.5')?.identity, 301);
    assert.equal(c.delete('10.0.0.5', local('endpoint:2')), 'deleted');
    assert.equal(c.lookup('10.0.0.5'), undefined);
    assert.equal(c.delete('10.0.0.5', local('endpoint:2')), 'not-found');
  });

  test('stronger sources shadow weaker ones, which come back on delete', () => {
    const c = new IPCache();
    const events: string[] = [];
    c.subscribe({
      onUpsert: (e, prev) => events.push(`up ${e.prefix} ${e.identity} ${e.source}${prev ? ` (was ${prev.identity})` : ''}`),
      onDelete: (prev) => events.push(`del ${prev.prefix} ${prev.identity}`),
    });
    assert.equal(c.upsert('10.0.0.7', { ...kv('b'), identity: 300, hostIP: '192.168.0.2' }), 'added');
    assert.equal(c.upsert('10.0.0.7', { ...local('endpoint:9'), identity: 301 }), 'updated');
    assert.equal(c.upsert('10.0.0.7', { ...kv('c'), identity: 302, hostIP: '192.168.0.3' }), 'shadowed');
    assert.equal(c.upsert('10.0.0.7', { ...local('endpoint:9'), identity: 301 }), 'unchanged');
    assert.deepEqual(c.candidates('10.0.0.7').map((e) => e.source), ['local', 'kvstore']);
    c.delete('10.0.0.7', local('endpoint:9'));
    c.delete('10.0.0.7', kv('c'));
    assert.deepEqual(events, [
      'up 10.0.0.7/32 300 kvstore',
      'up 10.0.0.7/32 301 local (was 300)',
      'up 10.0.0.7/32 302 kvstore (was 301)',
      'del 10.0.0.7/32 302',
    ]);
  });

  test('subscribe with replay delivers the current state first', () => {
    const c = new IPCache();
    c.upsert('10.0.0.1', { ...local('endpoint:1'), identity: 300 });
    const seen: IpcacheEntry[] = [];
    c.subscribe({ onUpsert: (e) => seen.push(e), onDelete: () => undefined }, { replay: true });
    assert.deepEqual(seen.map((e) => e.prefix), ['10.0.0.1/32']);
  });

  test('bad input is rejected with typed errors', () => {
    const c = new IPCache();
    const cases: Array<[() => unknown, string]> = [
      [() => c.upsert('10.0.0.1/8', { ...local('x'), identity: 300 }), IpcacheErrorCode.INVALID_PREFIX],
      [() => c.upsert('10.0.0.256', { ...local('x'), identity: 300 }), IpcacheErrorCode.INVALID_PREFIX],
      [() => c.upsert('fe80::1%eth0', { ...local('x'), identity: 300 }), IpcacheErrorCode.INVALID_PREFIX],
      [() => c.upsert('10.0.0.1', { ...local('x'), identity: 70000 }), IpcacheErrorCode.INVALID_IDENTITY],
      [() => c.upsert('10.0.0.1', { ...local('x'), identity: 300, hostIP: 'node-a' }), IpcacheErrorCode.INVALID_HOST_IP],
      [() => c.upsert('10.0.0.1', { source: 'gossip' as never, owner: 'x', identity: 300 }), IpcacheErrorCode.INVALID_METADATA],
      [() => c.delete('10.0.0.1', { source: 'local', owner: '' }), IpcacheErrorCode.INVALID_METADATA],
    ];
    for (const [fn, code] of cases) assert.throws(fn, (err: unknown) => err instanceof IpcacheError && err.code === code, code);
    assert.equal(c.size, 0, 'nothing half-applied');
  });
});

describe('IPCache against a model of per-source entries (property)', () => {
  // A slot keeps one source's entry without a per-source Map and switches forms as sources come and go:
  // whatever the sequence, effective entries, candidates, per-source lists and the emitted changes match the model.
  test('upserts and deletes over a few sources and prefixes', () => {
    const sources = ['local', 'kvstore', 'generated', 'restored'] as const;
    const op = fc.record({
      // Upserts twice as often as deletes, two prefixes: slots of three and four sources come up.
      del: fc.constantFrom(false, false, true),
      prefix: fc.constantFrom('10.0.0.1/32', 'fd00::1/128'),
      source: fc.constantFrom(...sources),
      owner: fc.constantFrom('a', 'b'),
      identity: fc.integer({ min: 256, max: 259 }),
    });
    fc.assert(
      fc.property(fc.array(op, { minLength: 10, maxLength: 60 }), (ops) => {
        const c = new IPCache();
        const effective = new Map<string, IpcacheEntry>();
        c.subscribe({ onUpsert: (e) => effective.set(e.prefix, e), onDelete: (e) => effective.delete(e.prefix) });
        const model = new Map<string, Map<string, { identity: number; owner: string }>>();
        for (const o of ops) {
          const slot = model.get(o.prefix) ?? new Map<string, { identity: number; owner: string }>();
          model.set(o.prefix, slot);
          if (o.del) {
            const had = slot.get(o.source);
            const outcome = c.delete(o.prefix, { source: o.source, owner: o.owner });
            assert.equal(outcome, had === undefined ? 'not-found' : had.owner !== o.owner ? 'owner-mismatch' : 'deleted');
            if (outcome === 'deleted') slot.delete(o.source);
          } else {
            c.upsert(o.prefix, { source: o.source, owner: o.owner, identity: o.identity });
            slot.set(o.source, { identity: o.identity, owner: o.owner });
          }
          for (const [prefix, entries] of model) {
            const want = [...entries].sort(([a], [b]) => sourcePriority(b as IpcacheSource) - sourcePriority(a as IpcacheSource));
            const got = c.candidates(prefix).map((e) => [e.source, { identity: e.identity, owner: e.owner }]);
            assert.deepEqual(got, want);
            assert.equal(c.get(prefix)?.source, want[0]?.[0]);
            assert.deepEqual(effective.get(prefix), c.get(prefix));
          }
          for (const s of sources) assert.equal(c.listSource(s).length, [...model.values()].filter((m) => m.has(s)).length);
        }
      }),
    );
  });
});

describe('PrefixMap', () => {
  test('lookup agrees with a brute-force longest match (property)', () => {
    const prefixArb = fc.tuple(fc.integer({ min: 0, max: 0xffffffff }), fc.integer({ min: 0, max: 32 })).map(([a, len]) => prefixOf(ipFromBigInt(4, BigInt(a)), len));
    fc.assert(
      fc.property(fc.array(prefixArb, { maxLength: 40 }), fc.integer({ min: 0, max: 0xffffffff }), (prefixes, addr) => {
        const m = new PrefixMap<number>();
        prefixes.forEach((p, i) => m.set(p, i));
        const host = ipFromBigInt(4, BigInt(addr));
        const ip = formatIp(host);
        let best: { len: number; value: number } | undefined;
        // The map keeps the last value set per prefix; brute force mirrors that.
        const last = new Map<string, number>();
        prefixes.forEach((p, i) => last.set(`${p.bits}/${p.length}`, i));
        for (const p of prefixes) {
          if (prefixContainsIp(p, host) && (best === undefined || p.length > best.len)) best = { len: p.length, value: last.get(`${p.bits}/${p.length}`)! };
        }
        assert.equal(m.lookup(ip)?.value, best?.value);
      }),
    );
  });
});
