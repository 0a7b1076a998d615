import { after, before } from 'node:test';
import { startEtcd, type EtcdHarness } from '../../../test/support/etcdHarness.js';
import { etcdStore, testLogger } from '../../identity/testing/cluster.js';
import { openBackend } from '../../kvstore/factory.js';
import { ownClientOf, runPolicyStoreSuite } from './testing/storeSuite.js';

let etcd: EtcdHarness;
before(async () => {
  etcd = await startEtcd();
});
after(async () => {
  await etcd?.destroy();
});

runPolicyStoreSuite(
  'etcd',
  () => etcdStore(etcd.endpoint),
  () => ownClientOf(() => openBackend({ kind: 'etcd', options: { 'etcd.endpoints': etcd.endpoint }, dataDir: '/nonexistent', logger: testLogger })),
);
