// EndpointManager.updateLabels refuses a label a pod may not carry, whoever
// calls it, and lets an endpoint that got one before the
// rule existed drop it. Over the fake datapath: no root needed.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, test } from 'node:test';
import { LabelError, LabelErrorCode, LabelSet, LabelSource } from '../labels/index.js';
import { EndpointWorld, RecordingLease } from './testing/world.js';

let w: EndpointWorld;
beforeEach(async () => {
  w = await EndpointWorld.create();
});
afterEach(async () => {
  await w.close();
});

test('updateLabels with reserved:host or a cidr label is refused and changes nothing', async () => {
  const ep = await w.manager.create(w.spec('tdl-relabel', ['app=web']), new RecordingLease());
  for (const text of ['reserved:host', 'cidr:0.0.0.0/0']) {
    const labels = LabelSet.parse([...ep.labels, text], LabelSource.K8s);
    await assert.rejects(w.manager.updateLabels(ep.id, labels), (err: unknown) => err instanceof LabelError && err.code === LabelErrorCode.SOURCE_NOT_ALLOWED && err.message.includes(text));
  }
  const now = w.manager.get(ep.id)!;
  assert.deepEqual([now.labels, now.identity, now.labelsRevision, now.state], [ep.labels, ep.identity, ep.labelsRevision, 'ready']);
  assert.equal(w.ipcache.lookup(ep.addresses[0]!.ip)?.identity, ep.identity);
});

test('an endpoint that carries reserved:host from before the rule can drop it', async () => {
  // Created straight through the manager, as the CNI path allowed before it refused such labels.
  const spec = w.spec('tdl-was-host', ['app=web']);
  const claimed = await w.manager.create({ ...spec, labels: spec.labels.with([...LabelSet.parse(['reserved:host'])]) }, new RecordingLease());
  assert.equal(claimed.identity, 1, 'reserved:host is the host identity');
  const fixed = await w.manager.updateLabels(claimed.id, LabelSet.parse(claimed.labels).without('host', LabelSource.Reserved));
  assert.ok(fixed.identity! >= 256, `a cluster identity now: ${fixed.identity}`);
  assert.equal(w.ipcache.lookup(claimed.addresses[0]!.ip)?.identity, fixed.identity);
});
