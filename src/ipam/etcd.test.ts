import { after, before, describe } from 'node:test';
import { type EtcdHarness, startEtcd } from '../../test/support/etcdHarness.js';
import { runAllocatorContract } from './contract.js';
import { etcdBackend } from './testing/backends.js';
import { blockSubject, clusterPoolSubject, hostScopeSubject } from './testing/subjects.js';

// The kvstore-backed allocators against a real etcd: the CAS transactions,
// modRevision compares and prefix listings must mean the same thing there.
// A missing etcd binary fails the suite (startEtcd throws); it never skips.
describe('ipam contract against etcd', () => {
  let etcd: EtcdHarness;
  before(async () => {
    etcd = await startEtcd();
  });
  after(async () => {
    await etcd?.destroy();
  });
  const open = () => etcdBackend(etcd.endpoint);
  runAllocatorContract('host-scope (etcd)', hostScopeSubject(open));
  runAllocatorContract('cluster-pool (etcd)', clusterPoolSubject(open));
  runAllocatorContract('block affinity (etcd)', blockSubject(open));
});
