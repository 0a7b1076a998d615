// An adopted endpoint's veth pair is its creator's. Deleting
// the endpoint (API DELETE, CNI DEL, or a deletion an agent restart finishes)
// removes its host routes and never the interface; adoption itself refuses an
// interface that is not the pod's veth, and records nothing.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, test } from 'node:test';
import type { Endpoint } from './endpoint.js';
import { EndpointErrorCode, isEndpointError } from './errors.js';
import { EndpointWorld, RecordingLease } from './testing/world.js';

let w: EndpointWorld;
beforeEach(async () => {
  w = await EndpointWorld.create();
});
afterEach(async () => {
  await w.close();
});

/** Adopts a veth pair `host`/eth0 made in a fresh pod namespace. */
async function adopted(containerId: string, host: string): Promise<{ ep: Endpoint; netns: string; lease: RecordingLease }> {
  const netns = w.newPodNetns();
  w.datapath.createVethPair(host, netns, 'eth0');
  const lease = new RecordingLease();
  const status = await w.manager.adopt({ ...w.spec(containerId, [], { netns }), hostIfName: host }, lease);
  return { ep: w.manager.get(status.id)!, netns, lease };
}

const routeTo = (ip: string) => w.datapath.hostRoutes().find((r) => r.dst === `${ip}/32`);

describe('adopted endpoints', () => {
  test('the record says adopted; a deletion removes the host route and leaves both ends of the veth pair', async () => {
    const { ep, netns, lease } = await adopted('tdl-ad', 'tdlad0');
    assert.equal(ep.adopted, true);
    assert.equal(routeTo(ep.addresses[0]!.ip)?.dev, 'tdlad0');
    await w.manager.delete(ep.id, { netns, lease });
    assert.equal(routeTo(ep.addresses[0]!.ip), undefined);
    assert.ok(w.datapath.linkNames()!.includes('tdlad0'));
    assert.ok(w.datapath.linkNames(netns)!.includes('eth0'));
    assert.equal(lease.released, 1);
  });

  test('a CNI DEL of the attachment leaves the interface too', async () => {
    const { ep, netns } = await adopted('tdl-ad', 'tdlad0');
    await w.manager.deleteAttachment({ containerId: 'tdl-ad', ifName: 'eth0', netns }, new RecordingLease());
    assert.equal(w.manager.get(ep.id), undefined);
    assert.ok(w.datapath.linkNames()!.includes('tdlad0'));
  });

  test('a deletion an agent restart finishes leaves the interface', async () => {
    const { ep } = await adopted('tdl-ad', 'tdlad0');
    await w.store.save({ ...ep, state: 'disconnecting' });
    await w.restart();
    const report = await w.manager.restore({ lease: () => new RecordingLease() });
    assert.equal(report.released, 1);
    assert.ok(w.datapath.linkNames()!.includes('tdlad0'));
    assert.equal(routeTo(ep.addresses[0]!.ip), undefined);
  });

  test('the node\'s uplink is refused as INVALID_ARGUMENT before anything is recorded or routed', async () => {
    const netns = w.newPodNetns();
    await assert.rejects(w.manager.adopt({ ...w.spec('tdl-up', [], { netns }), hostIfName: 'eth0' }, new RecordingLease()), (err: unknown) => {
      assert.ok(isEndpointError(err) && err.code === EndpointErrorCode.INVALID_ARGUMENT, String(err));
      assert.match(err.message, /refusing to adopt eth0/);
      return true;
    });
    assert.deepEqual(w.manager.list(), []);
    assert.deepEqual(w.datapath.hostRoutes().filter((r) => r.dev === 'eth0'), []);
    assert.deepEqual((await w.store.loadAll()).endpoints, []);
  });
});
