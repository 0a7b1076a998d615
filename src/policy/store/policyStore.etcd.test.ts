import { after, before } from 'node:test';
import { startEtcd, type EtcdHarness } from '../../../test/support/etcdHarness.js';
import { etcdStore, testLogger } from '../../identity/testing/cluster.js';
import { openBackend } from '../../kvstore/factory.js';
import type { Backend } from '../../kvstore/types.js';
import { runPolicyStoreSuite } from './testing/storeSuite.js';

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
  async () => {
    const open = () => openBackend({ kind: 'etcd', options: { 'etcd.endpoints': etcd.endpoint }, dataDir: '/nonexistent', logger: testLogger });
    const opened: Backend[] = [await open()];
    return {
      backend: opened[0]!,
      reopen: async () => {
        const b = await open();
        opened.push(b);
        return b;
      },
      cleanup: async () => {
        for (const b of opened) await b.close().catch(() => undefined);
      },
    };
  },
);
