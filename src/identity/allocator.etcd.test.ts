import { after, before } from 'node:test';
import { startEtcd, type EtcdHarness } from '../../test/support/etcdHarness.js';
import { etcdStore } from './testing/cluster.js';
import { runAllocatorSuite } from './testing/allocatorSuite.js';

let etcd: EtcdHarness;
before(async () => {
  etcd = await startEtcd();
});
after(async () => {
  await etcd?.destroy();
});

runAllocatorSuite('etcd', () => etcdStore(etcd.endpoint));
