import { after, before } from 'node:test';
import { startEtcd, type EtcdHarness } from '../../test/support/etcdHarness.js';
import { etcdStore } from '../identity/testing/cluster.js';
import { runSyncSuite } from './testing/syncSuite.js';

let etcd: EtcdHarness;
before(async () => {
  etcd = await startEtcd();
});
after(async () => {
  await etcd?.destroy();
});

runSyncSuite('etcd', () => etcdStore(etcd.endpoint));
