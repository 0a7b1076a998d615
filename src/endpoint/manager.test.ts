// EndpointManager over the fake datapath, the embedded kvstore and the real
// identity, ipcache and policy subsystems: no root needed.
import { dbFromWebPolicy } from '../policy/testing/policies.js';
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { DatapathError } from '../datapath/types.js';
import { LabelSet } from '../labels/index.js';
import type { Endpoint } from './endpoint.js';
import { EndpointErrorCode, isEndpointError } from './errors.js';
import { EndpointWorld, RecordingLease, waitFor } from './testing/world.js';

const DB_FROM_WEB = dbFromWebPolicy({ namespace: 'default', tcpPort: 5432 });

let w: EndpointWorld;
beforeEach(async () => {
  w = await EndpointWorld.create();
});
afterEach(async () => {
  await w.close();
});

async function rejectsWithCode(p: Promise<unknown>, code: string): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(isEndpointError(err), `expected an EndpointError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    return true;
  });
}

/** Nothing of an endpoint is left anywhere: registry, state dir, identity, ipcache, policy, datapath. */
async function assertNothingLeft(containerId: string): Promise<void> {
  assert.equal(w.manager.byContainer(containerId), undefined, 'no endpoint');
  assert.deepEqual((await w.store.loadAll()).endpoints, [], 'no state file');
  assert.deepEqual(w.identities.list().map((i) => [i.id, w.identities.references(i.id)]).filter(([, refs]) => refs! > 0), [], 'no identity reference');
  assert.deepEqual(w.ipcache.list(), [], 'no ipcache entry');
  assert.deepEqual(w.engine.endpointIds(), [], 'no endpoint in the policy engine');
  assert.deepEqual(await w.datapath.listPodHostInterfaces(), [], 'no host interface');
}

describe('lifecycle', () => {
  test('create goes waiting-for-identity → waiting-to-regenerate → regenerating → ready, and answers once the first regeneration is in force', async () => {
    const lease = new RecordingLease();
    const ep = await w.manager.create(w.spec('tdl-a', ['app=web']), lease);
    assert.deepEqual(w.statesOf(ep.id), ['waiting-for-identity', 'waiting-to-regenerate', 'regenerating', 'ready']);
    assert.equal(ep.state, 'ready');
    assert.equal(lease.confirmed, 1);
    const synced = w.datapath.endpointState(ep.id);
    assert.ok(synced, 'the datapath holds the endpoint\'s state');
    assert.equal(synced.identity, ep.identity);
    assert.equal(synced.policy.revision, ep.policyRevision);
    assert.equal(ep.policyRevision, w.policy.revision);
    assert.equal(ep.desiredPolicyRevision, w.policy.revision);
    assert.equal(w.ipcache.lookup(ep.addresses[0]!.ip)?.identity, ep.identity);
    assert.deepEqual(w.engine.endpointIds(), [ep.id]);
    assert.equal((await w.store.loadAll()).endpoints[0]?.state, 'ready');
  });

  test('the regenerating state is observable while the datapath works', async () => {
    const gate = w.datapath.gate('syncEndpoint');
    const creating = w.manager.create(w.spec('tdl-a'), new RecordingLease());
    await gate.arrived();
    const ep = w.manager.byContainer('tdl-a')!;
    const status = w.manager.status(ep);
    assert.equal(status.state, 'regenerating');
    assert.equal(status.policyRevision, 0, 'nothing realized yet');
    gate.open();
    assert.equal((await creating).state, 'ready');
  });

  test('delete goes disconnecting → disconnected and removes everything', async () => {
    const lease = new RecordingLease();
    const ep = await w.manager.create(w.spec('tdl-a', ['app=web']), lease);
    const gate = w.datapath.gate('removePod');
    const deleting = w.manager.delete(ep.id, { lease });
    await gate.arrived();
    assert.equal(w.manager.get(ep.id)?.state, 'disconnecting');
    assert.equal((await w.store.loadAll()).endpoints[0]?.state, 'disconnecting', 'persisted, so a restart finishes it');
    gate.open();
    await deleting;
    assert.deepEqual(w.statesOf(ep.id).slice(-2), ['disconnecting', 'disconnected']);
    assert.equal(lease.released, 1);
    await assertNothingLeft('tdl-a');
  });

  test('a second creation for the same attachment is a conflict and touches nothing', async () => {
    const spec = w.spec('tdl-a');
    const ep = await w.manager.create(spec, new RecordingLease());
    const before = w.datapath.calls.length;
    await rejectsWithCode(w.manager.create({ ...spec, addresses: w.spec('x').addresses }, new RecordingLease()), EndpointErrorCode.CONFLICT);
    assert.equal(w.datapath.calls.filter((c) => c.op === 'addPod').length, w.datapath.calls.slice(0, before).filter((c) => c.op === 'addPod').length);
    assert.equal(w.manager.get(ep.id)?.state, 'ready');
  });
});

describe('creation rolls back every step when a later one fails', () => {
  const cases: Array<[string, (w: EndpointWorld, lease: RecordingLease) => void]> = [
    ['the pod network', (w) => w.datapath.failNext('addPod')],
    ['the first regeneration (datapath)', (w) => w.datapath.failNext('syncEndpoint')],
    ['confirming the addresses', (_w, lease) => (lease.failConfirm = new Error('injected: IPAM confirm failed'))],
  ];
  for (const [step, inject] of cases) {
    test(`failure at ${step}`, async () => {
      const lease = new RecordingLease();
      inject(w, lease);
      const spec = w.spec('tdl-fail', ['app=web']);
      await assert.rejects(w.manager.create(spec, lease));
      await assertNothingLeft('tdl-fail');
      assert.deepEqual(w.datapath.linkNames(spec.netns), ['lo'], 'no interface left in the pod');
      assert.equal(lease.confirmed, 0);
      assert.equal(w.statesOf(1).at(-1) ?? 'disconnected', 'disconnected');
    });
  }

  test('failure at the first regeneration (policy does not fit the map)', async () => {
    await w.close();
    w = await EndpointWorld.create({ maxEntriesPerEndpoint: 1 });
    const lease = new RecordingLease();
    await rejectsWithCode(w.manager.create(w.spec('tdl-big'), lease), EndpointErrorCode.REGENERATION_FAILED);
    await assertNothingLeft('tdl-big');
  });

  test('failure at persisting the endpoint', async () => {
    const { writeFile } = await import('node:fs/promises');
    // A file where the state dir's endpoint directory must go: mkdir fails.
    await w.store.loadAll();
    await writeFile(`${w.store.dir}/1`, 'in the way');
    const lease = new RecordingLease();
    await assert.rejects(w.manager.create(w.spec('tdl-store'), lease));
    assert.equal(w.manager.byContainer('tdl-store'), undefined);
    assert.deepEqual(w.ipcache.list(), []);
    assert.deepEqual(w.engine.endpointIds(), []);
    assert.deepEqual(await w.datapath.listPodHostInterfaces(), []);
  });
});

describe('regeneration queue', () => {
  test('requests made while one runs are coalesced into one more run, in order', async () => {
    const ep = await w.manager.create(w.spec('tdl-a'), new RecordingLease());
    const runsBefore = w.manager.regenerationCount(ep.id);
    const gate = w.datapath.gate('syncEndpoint');
    const first = w.manager.regenerate(ep.id);
    await gate.arrived(1);
    const queued = [w.manager.regenerate(ep.id), w.manager.regenerate(ep.id), w.manager.regenerate(ep.id), w.manager.regenerate(ep.id)];
    assert.equal(w.manager.get(ep.id)?.state, 'regenerating');
    gate.open();
    await first;
    await Promise.all(queued);
    assert.equal(w.manager.regenerationCount(ep.id) - runsBefore, 2, 'one running, four coalesced into one');
    assert.equal(w.manager.get(ep.id)?.state, 'ready');
  });

  test('a policy import while a regeneration is in flight is realized by the next one', async () => {
    const db = await w.manager.create(w.spec('tdl-db', ['app=db']), new RecordingLease());
    const gate = w.datapath.gate('syncEndpoint');
    const inFlight = w.manager.regenerate(db.id);
    await gate.arrived(1);
    const imported = w.policy.importText(DB_FROM_WEB);
    assert.deepEqual(imported.endpoints, [db.id]);
    const during = w.manager.status(w.manager.get(db.id)!);
    assert.ok(during.policyRevision < during.desiredPolicyRevision, 'realized lags desired while regenerating');
    gate.open();
    const realizedFirst = await inFlight;
    assert.ok(realizedFirst < imported.revision, 'the in-flight run had the old snapshot');
    await waitFor('the import to be realized', () => w.datapath.endpointState(db.id)?.policy.revision === imported.revision);
    await waitFor('the endpoint to settle', () => w.manager.get(db.id)?.state === 'ready');
    const revisions = w.datapath.syncs.filter((s) => s.id === db.id).map((s) => s.policy.revision);
    assert.deepEqual(revisions, [...revisions].sort((a, b) => a - b), 'revisions are realized in order');
  });

  test('regenerations of different endpoints run side by side', async () => {
    const a = await w.manager.create(w.spec('tdl-a'), new RecordingLease());
    const b = await w.manager.create(w.spec('tdl-b'), new RecordingLease());
    const gate = w.datapath.gate('syncEndpoint');
    const both = Promise.all([w.manager.regenerate(a.id), w.manager.regenerate(b.id)]);
    await gate.arrived(2);
    gate.open();
    await both;
  });
});

describe('policy revisions', () => {
  test('an import regenerates the selected endpoint, which realizes the new revision; others are in sync without a run', async () => {
    const db = await w.manager.create(w.spec('tdl-db', ['app=db']), new RecordingLease());
    const web = await w.manager.create(w.spec('tdl-web', ['app=web']), new RecordingLease());
    const webRuns = w.manager.regenerationCount(web.id);
    const r = w.policy.importText(DB_FROM_WEB);
    assert.deepEqual(r.endpoints, [db.id]);
    await waitFor('db to realize the import', () => w.manager.status(w.manager.get(db.id)!).policyRevision === r.revision);
    const status = w.manager.status(w.manager.get(db.id)!);
    assert.equal(status.desiredPolicyRevision, r.revision);
    assert.equal(status.state, 'ready');
    const entries = w.datapath.endpointState(db.id)!.policy.entries;
    assert.ok(entries.some((e) => e.key.direction === 'ingress' && e.key.identity === web.identity && e.key.port === 5432), 'the db map allows web on 5432');
    assert.equal(w.manager.regenerationCount(web.id), webRuns, 'web was not regenerated');
    assert.equal(w.manager.status(w.manager.get(web.id)!).policyRevision, r.revision, 'web is in sync at the new revision');

    const d = w.policy.deletePolicies({ name: 'db-from-web', namespace: 'default' });
    await waitFor('db to realize the deletion', () => w.datapath.endpointState(db.id)?.policy.revision === d.revision);
    assert.ok(!w.datapath.endpointState(db.id)!.policy.entries.some((e) => e.key.identity === web.identity));
  });

  test('a failed regeneration leaves the endpoint not-ready with the error; the next one recovers it', async () => {
    const db = await w.manager.create(w.spec('tdl-db', ['app=db']), new RecordingLease());
    const realized = w.manager.status(w.manager.get(db.id)!).policyRevision;
    w.datapath.failNext('syncEndpoint', new DatapathError('failed', 'injected: route replace failed'));
    const r = w.policy.importText(DB_FROM_WEB);
    await waitFor('the regeneration to fail', () => w.manager.get(db.id)?.state === 'not-ready');
    const failed = w.manager.status(w.manager.get(db.id)!);
    assert.match(failed.regenerationError ?? '', /injected/);
    assert.equal(failed.policyRevision, realized, 'the old revision stays realized');
    assert.equal(failed.desiredPolicyRevision, r.revision);
    assert.equal(await w.manager.regenerate(db.id), r.revision);
    const ok = w.manager.status(w.manager.get(db.id)!);
    assert.equal(ok.state, 'ready');
    assert.equal(ok.regenerationError, undefined);
    assert.equal(ok.policyRevision, r.revision);
  });
});

describe('labels and identities', () => {
  test('a label change gives a new identity, switches the ipcache, releases the old identity and regenerates', async () => {
    const ep = await w.manager.create(w.spec('tdl-a', ['app=old']), new RecordingLease());
    const oldIdentity = ep.identity!;
    w.transitions.length = 0;
    const labels = LabelSet.parse(ep.labels).without('app').with(LabelSet.parse(['k8s:app=new']).toArray());
    const updated = await w.manager.updateLabels(ep.id, labels);
    assert.notEqual(updated.identity, oldIdentity);
    assert.equal(updated.labelsRevision, 1);
    assert.ok(updated.labels.includes('k8s:app=new'));
    assert.deepEqual(w.statesOf(ep.id), ['waiting-for-identity', 'waiting-to-regenerate', 'regenerating', 'ready']);
    assert.equal(w.ipcache.lookup(ep.addresses[0]!.ip)?.identity, updated.identity);
    assert.equal(w.datapath.endpointState(ep.id)?.identity, updated.identity);
    assert.equal(w.identities.references(oldIdentity), 0);
    assert.equal(w.identities.references(updated.identity!), 1);
    assert.equal((await w.store.loadAll()).endpoints[0]?.identity, updated.identity);
  });

  test('a peer taking the selected labels is a new identity: the selecting endpoint is regenerated with it', async () => {
    const db = await w.manager.create(w.spec('tdl-db', ['app=db']), new RecordingLease());
    const other = await w.manager.create(w.spec('tdl-other', ['app=other']), new RecordingLease());
    w.policy.importText(DB_FROM_WEB);
    const becomes = await w.manager.updateLabels(other.id, LabelSet.parse(other.labels).without('app').with(LabelSet.parse(['k8s:app=web']).toArray()));
    await waitFor('db to allow the new web identity', () =>
      w.datapath.endpointState(db.id)?.policy.entries.some((e) => e.key.direction === 'ingress' && e.key.identity === becomes.identity),
    );
    await waitFor('db to settle in sync', () => {
      const s = w.manager.status(w.manager.get(db.id)!);
      return s.state === 'ready' && s.policyRevision === s.desiredPolicyRevision;
    });
  });

  test('a label change on an endpoint being deleted is refused', async () => {
    const ep = await w.manager.create(w.spec('tdl-a'), new RecordingLease());
    const gate = w.datapath.gate('removePod');
    const deleting = w.manager.delete(ep.id, { lease: new RecordingLease() });
    await gate.arrived();
    const relabel = w.manager.updateLabels(ep.id, LabelSet.parse(['k8s:app=x']));
    gate.open();
    await deleting;
    await rejectsWithCode(relabel, EndpointErrorCode.NOT_FOUND);
  });
});

describe('deletion', () => {
  test('deleting an attachment twice, or one never created, succeeds and releases its addresses', async () => {
    const spec = w.spec('tdl-a');
    await w.manager.create(spec, new RecordingLease());
    const lease = new RecordingLease();
    await w.manager.deleteAttachment({ containerId: 'tdl-a', ifName: 'eth0', netns: spec.netns }, lease);
    await w.manager.deleteAttachment({ containerId: 'tdl-a', ifName: 'eth0', netns: spec.netns }, lease);
    await w.manager.deleteAttachment({ containerId: 'tdl-never', ifName: 'eth0', netns: '/var/run/netns/tdl-gone' }, lease);
    assert.equal(lease.released, 3);
    await assertNothingLeft('tdl-a');
    await rejectsWithCode(w.manager.delete(4242, { lease }), EndpointErrorCode.NOT_FOUND);
  });

  test('deleting once the pod namespace is gone works', async () => {
    const spec = w.spec('tdl-a');
    await w.manager.create(spec, new RecordingLease());
    w.datapath.removeNetns(spec.netns);
    await w.manager.deleteAttachment({ containerId: 'tdl-a', ifName: 'eth0', netns: spec.netns }, new RecordingLease());
    await assertNothingLeft('tdl-a');
  });

  test('a deletion without a namespace path never uses the recorded one, which may name another process\'s namespace by now', async () => {
    const spec = w.spec('tdl-a');
    const ep = await w.manager.create(spec, new RecordingLease());
    // The pod's process is gone and its /proc/<pid>/ns/net-like path now names another namespace.
    w.datapath.removeNetns(spec.netns);
    w.datapath.addNetns(spec.netns);
    w.datapath.createVethPair('tdlothers0', spec.netns, 'eth0');
    await w.manager.delete(ep.id, { lease: new RecordingLease() });
    assert.deepEqual(w.datapath.linkNames(spec.netns), ['eth0', 'lo'], 'the other namespace keeps its eth0');
    await assertNothingLeft('tdl-a');
  });

  test('a deletion retried after a failure does not release the identity twice', async () => {
    const a = await w.manager.create(w.spec('tdl-a', ['app=same']), new RecordingLease());
    const b = await w.manager.create(w.spec('tdl-b', ['app=same']), new RecordingLease());
    assert.equal(a.identity, b.identity);
    assert.equal(w.identities.references(a.identity!), 2);
    w.datapath.failNext('removePod');
    await assert.rejects(w.manager.delete(a.id, { lease: new RecordingLease() }));
    assert.equal(w.manager.get(a.id)?.state, 'disconnecting');
    await w.manager.delete(a.id, { lease: new RecordingLease() });
    assert.equal(w.identities.references(b.identity!), 1, 'b keeps its reference');
    assert.equal(w.manager.get(b.id)?.state, 'ready');
  });

  test('a deletion waits for a regeneration in flight and cancels queued ones', async () => {
    const ep = await w.manager.create(w.spec('tdl-a'), new RecordingLease());
    const gate = w.datapath.gate('syncEndpoint');
    const running = w.manager.regenerate(ep.id);
    await gate.arrived(1);
    const queued = w.manager.regenerate(ep.id);
    const deleting = w.manager.delete(ep.id, { lease: new RecordingLease() });
    await rejectsWithCode(queued, EndpointErrorCode.DISCONNECTING);
    gate.open();
    await running;
    await deleting;
    await assertNothingLeft('tdl-a');
  });
});

describe('network namespaces', () => {
  test('the node\'s own namespace and files that are no namespace are refused; nothing is created', async () => {
    for (const netns of ['/proc/self/ns/net', '/proc/1/ns/net']) {
      await rejectsWithCode(w.manager.create(w.spec('tdl-node', [], { netns }), new RecordingLease()), EndpointErrorCode.NETNS_REFUSED);
    }
    w.datapath.addNonNetnsFile('/tmp/tdl-fifo');
    await rejectsWithCode(w.manager.create(w.spec('tdl-fifo', [], { netns: '/tmp/tdl-fifo' }), new RecordingLease()), EndpointErrorCode.NETNS_REFUSED);
    assert.equal(w.datapath.calls.filter((c) => c.op === 'addPod').length, 0);
    assert.ok(w.datapath.linkNames()!.includes('eth0'), 'the node\'s eth0 is untouched');
    await assertNothingLeft('tdl-node');
  });

  test('deleting with the node\'s namespace as the pod\'s touches nothing in it but releases the addresses', async () => {
    const spec = w.spec('tdl-a');
    await w.manager.create(spec, new RecordingLease());
    const lease = new RecordingLease();
    await w.manager.deleteAttachment({ containerId: 'tdl-a', ifName: 'eth0', netns: '/proc/self/ns/net' }, lease);
    await w.manager.deleteAttachment({ containerId: 'tdl-never', ifName: 'eth0', netns: '/proc/self/ns/net' }, lease);
    assert.equal(lease.released, 2);
    assert.ok(w.datapath.linkNames()!.includes('eth0'), 'the node\'s eth0 is untouched');
    await assertNothingLeft('tdl-a');
  });

  test('checking with the node\'s namespace is refused', async () => {
    const ep = await w.manager.create(w.spec('tdl-a'), new RecordingLease());
    await rejectsWithCode(w.manager.check(ep.id, '/proc/self/ns/net'), EndpointErrorCode.NETNS_REFUSED);
    await w.manager.check(ep.id, ep.netns);
  });
});

describe('adoption', () => {
  test('a veth pair made by someone else becomes a ready endpoint; a missing host interface rolls back', async () => {
    const netns = w.newPodNetns();
    const base = w.spec('tdl-adopt', ['app=adopted'], { netns });
    await assert.rejects(w.manager.adopt({ ...base, hostIfName: 'tdladopt0' }, new RecordingLease()));
    await assertNothingLeft('tdl-adopt');
    w.datapath.createVethPair('tdladopt0', netns, 'eth0');
    const lease = new RecordingLease();
    const ep = await w.manager.adopt({ ...base, id: 77, hostIfName: 'tdladopt0' }, lease);
    assert.equal(ep.id, 77);
    assert.equal(ep.state, 'ready');
    assert.equal(lease.confirmed, 1);
    assert.equal(w.datapath.hostRoutes().find((r) => r.dst === `${ep.addresses[0]!.ip}/32`)?.dev, 'tdladopt0');
    await rejectsWithCode(w.manager.adopt({ ...base, hostIfName: 'tdladopt0' }, lease), EndpointErrorCode.CONFLICT);
  });
});

describe('restore', () => {
  test('endpoints come back with their IDs and identities and are regenerated; vanished ones, interrupted deletions and orphans are cleaned up', async () => {
    const lease = new RecordingLease();
    const kept = await w.manager.create(w.spec('tdl-kept', ['app=kept']), lease);
    const vanished = w.spec('tdl-vanished');
    const gone = await w.manager.create(vanished, lease);
    const interrupted = await w.manager.create(w.spec('tdl-interrupted'), lease);
    // A deletion cut short after it was persisted: the state file says disconnecting.
    await w.store.save({ ...(w.manager.get(interrupted.id) as Endpoint), state: 'disconnecting' });
    // An interrupted ADD's veth pair that no endpoint owns.
    const orphan = await w.datapath.addPod({ containerId: 'tdl-orphan', netns: w.newPodNetns(), ifName: 'eth0', mtu: 1500, addresses: w.spec('x').addresses });

    await w.restart();
    w.datapath.removeNetns(vanished.netns);
    const leases = new Map<string, RecordingLease>();
    const report = await w.manager.restore({ lease: (ep) => leases.get(ep.containerId) ?? leases.set(ep.containerId, new RecordingLease()).get(ep.containerId)! });
    assert.deepEqual(report, { restored: 1, released: 2, failed: 0, reclaimed: [], conflicts: [], quarantined: [], orphansRemoved: [orphan.hostIfName], orphansKept: [] });
    const back = w.manager.get(kept.id)!;
    assert.equal(back.containerId, 'tdl-kept');
    assert.equal(back.identity, kept.identity, 'the same identity number comes back');
    assert.equal(back.state, 'ready');
    assert.deepEqual(w.statesOf(kept.id), ['waiting-for-identity', 'waiting-to-regenerate', 'regenerating', 'ready']);
    assert.equal(w.datapath.endpointState(kept.id)?.policy.revision, w.policy.revision);
    assert.equal(leases.get('tdl-kept')?.confirmed, 1);
    assert.equal(leases.get('tdl-vanished')?.released, 1);
    assert.equal(leases.get('tdl-interrupted')?.released, 1);
    assert.equal(w.manager.get(gone.id), undefined);
    assert.equal(w.manager.get(interrupted.id), undefined);
    assert.deepEqual((await w.store.loadAll()).endpoints.map((e) => e.id), [kept.id]);
    assert.deepEqual(await w.datapath.listPodHostInterfaces(), [kept.hostIfName]);
    assert.equal(w.ipcache.lookup(kept.addresses[0]!.ip)?.identity, kept.identity);
  });
});
