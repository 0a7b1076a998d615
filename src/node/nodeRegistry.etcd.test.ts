import { after, before } from 'node:test';
import { startEtcd, type EtcdHarness } from '../../test/support/etcdHarness.js';
import { etcdStore } from '../identity/testing/cluster.js';
import { runRegistrySuite } from './testing/registrySuite.js';

let etcd: EtcdHarness;
before(async () => {
  etcd = await startEtcd();
});
after(async () => {
  await etcd?.destroy();
});

runRegistrySuite('etcd', () => etcdStore(etcd.endpoint));
