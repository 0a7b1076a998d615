// The endpoint manager uses the answer of AddressLease.confirm: IPAM no longer holding an endpoint's addresses (a provisional
// allocation that expired) fails a creation or adoption and rolls it back,
// and a restore says so. Over the fake datapath: no root needed.
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import { pino } from 'pino';
import { EndpointErrorCode, isEndpointError } from './errors.js';
import { EndpointWorld, RecordingLease } from './testing/world.js';

let w: EndpointWorld;
afterEach(async () => {
  await w.close();
});

async function rejectsAddressesLost(p: Promise<unknown>): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(isEndpointError(err, EndpointErrorCode.ADDRESSES_LOST), `expected ADDRESSES_LOST, got ${String(err)}`);
    assert.match(err.message, /no longer allocated/);
    return true;
  });
}

/** Nothing of the endpoint is held: registry, state file, identity reference, ipcache, policy. */
async function assertNothingHeld(containerId: string): Promise<void> {
  assert.equal(w.manager.byContainer(containerId), undefined, 'no endpoint');
  assert.deepEqual((await w.store.loadAll()).endpoints, [], 'no state file');
  assert.deepEqual(w.identities.list().filter((i) => w.identities.references(i.id) > 0), [], 'no identity reference');
  assert.deepEqual(w.ipcache.list(), [], 'no ipcache entry');
  assert.deepEqual(w.engine.endpointIds(), [], 'no endpoint in the policy engine');
}

describe('a lease whose addresses are lost', () => {
  test('creation fails with ADDRESSES_LOST and removes the pod network and everything else', async () => {
    w = await EndpointWorld.create();
    const lease = new RecordingLease();
    lease.lost = true;
    const spec = w.spec('tdl-lost', ['app=web']);
    await rejectsAddressesLost(w.manager.create(spec, lease));
    await assertNothingHeld('tdl-lost');
    assert.deepEqual(await w.datapath.listPodHostInterfaces(), [], 'no host interface');
    assert.deepEqual(w.datapath.linkNames(spec.netns), ['lo'], 'nothing left in the pod');
    assert.equal(lease.confirmed, 0);
  });

  test('adoption fails with ADDRESSES_LOST, takes its host routes back and leaves the veth pair to its maker', async () => {
    w = await EndpointWorld.create();
    const netns = w.newPodNetns();
    w.datapath.createVethPair('tdladopt0', netns, 'eth0');
    const spec = w.spec('tdl-adopt-lost', ['app=adopted'], { netns });
    const lease = new RecordingLease();
    lease.lost = true;
    await rejectsAddressesLost(w.manager.adopt({ ...spec, hostIfName: 'tdladopt0' }, lease));
    await assertNothingHeld('tdl-adopt-lost');
    assert.equal(w.datapath.hostRoutes().find((r) => r.dst === `${spec.addresses[0]!.ip}/32`), undefined, 'no host route');
    assert.ok(w.datapath.linkNames()!.includes('tdladopt0'), 'the adopted interface is not tendril\'s to delete');
  });

  test('restore keeps the pod online and logs an error naming the endpoint', async () => {
    const lines: Array<{ level: number; msg: string; endpoint?: number }> = [];
    w = await EndpointWorld.create({ log: pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s) as (typeof lines)[number]) }) });
    const ep = await w.manager.create(w.spec('tdl-restored', ['app=web']), new RecordingLease());
    await w.restart();
    const lease = new RecordingLease();
    lease.lost = true;
    const report = await w.manager.restore({ lease: () => lease });
    assert.equal(report.restored, 1);
    assert.equal(w.manager.get(ep.id)?.state, 'ready', 'the pod keeps its network');
    const logged = lines.find((l) => l.level === 50 && l.endpoint === ep.id);
    assert.ok(logged, `an error names endpoint ${ep.id}: ${JSON.stringify(lines.filter((l) => l.level >= 40))}`);
    assert.match(logged.msg, /not allocated to it/);
  });
});
