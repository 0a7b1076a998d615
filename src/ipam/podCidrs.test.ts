import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { Backend } from '../kvstore/types.js';
import { BlockAllocator } from './blockAllocator.js';
import { ClusterPoolAllocator } from './clusterPool.js';
import { DelegatedAllocator } from './delegated.js';
import { HostScopeAllocator } from './hostScope.js';
import { type TestBackend, embeddedBackend } from './testing/backends.js';
import { quietLogger } from './testing/subjects.js';
import type { Allocator } from './types.js';

// The CIDRs each allocator reports for the node registry (other nodes route
// them to this node), and the change notifications block IPAM sends.
describe('ipam pod CIDRs', () => {
  let tb: TestBackend;
  let kv: Backend;
  const running: Allocator[] = [];

  beforeEach(async () => {
    tb = await embeddedBackend();
    kv = tb.backend;
  });
  afterEach(async () => {
    for (const a of running.splice(0)) await a.stop();
    await kv.close();
    await tb.cleanup();
  });

  async function started<A extends Allocator>(a: A): Promise<A> {
    await a.start();
    running.push(a);
    return a;
  }

  function counter(a: Allocator): { readonly count: number; off(): void } {
    let count = 0;
    const off = a.onPodCidrsChanged?.(() => count++) ?? (() => undefined);
    return {
      get count() {
        return count;
      },
      off,
    };
  }

  it('host-scope: the configured CIDRs, IPv4 first, canonical', async () => {
    const a = new HostScopeAllocator({ backend: kv, host: 'node-a', podCidrs: [{ cidr: 'fd00:30::/124' }, { cidr: '10.30.0.0/28' }], logger: quietLogger });
    assert.deepEqual(a.podCidrs(), ['10.30.0.0/28', 'fd00:30::/124']);
    const seen = counter(a);
    await started(a);
    await a.allocate({ owner: 'p1', family: 4 });
    assert.deepEqual(a.podCidrs(), ['10.30.0.0/28', 'fd00:30::/124']);
    assert.equal(seen.count, 0, 'configured CIDRs never change');
  });

  it('cluster-pool: the per-node CIDRs this node was given, the same after a restart', async () => {
    const make = (host: string) =>
      new ClusterPoolAllocator({ backend: kv, host, pools: [{ name: 'c4', cidr: '10.80.0.0/26' }, { name: 'c6', cidr: 'fd00:80::/120' }], maskSize: { 4: 28, 6: 124 }, logger: quietLogger });
    const a = make('node-a');
    assert.deepEqual(a.podCidrs(), [], 'nothing before start');
    const seen = counter(a);
    await started(a);
    assert.deepEqual(a.podCidrs(), ['10.80.0.0/28', 'fd00:80::/124']);
    assert.equal(seen.count, 1, 'claiming at start is a change');
    const b = await started(make('node-b'));
    assert.deepEqual(b.podCidrs(), ['10.80.0.16/28', 'fd00:80::10/124']);
    await a.stop();
    const again = await started(make('node-a'));
    assert.deepEqual(again.podCidrs(), ['10.80.0.0/28', 'fd00:80::/124']);
  });

  it('block: the affine blocks; claiming a second block notifies and lists both; releasing one notifies', async () => {
    const make = () => new BlockAllocator({ backend: kv, host: 'node-a', pools: [{ name: 'small', cidr: '10.70.0.0/28', blockSize: 30 }], routerAddress: false, logger: quietLogger });
    const a = await started(make());
    assert.deepEqual(a.podCidrs(), [], 'blocks are claimed on demand');
    const seen = counter(a);
    const first = await a.allocate({ owner: 'p0', family: 4 });
    assert.equal(seen.count, 1);
    assert.deepEqual(a.podCidrs(), [first.cidr]);
    for (let i = 1; i < 4; i++) await a.allocate({ owner: `p${i}`, family: 4 });
    assert.equal(seen.count, 1, 'filling an affine block claims nothing');
    const fifth = await a.allocate({ owner: 'p4', family: 4 });
    assert.notEqual(fifth.cidr, first.cidr);
    assert.equal(seen.count, 2);
    assert.deepEqual(new Set(a.podCidrs()), new Set([first.cidr, fifth.cidr]));
    const lastOctets = a.podCidrs().map((c) => Number(c.split('/')[0]!.split('.')[3]));
    assert.deepEqual(lastOctets, [...lastOctets].sort((x, y) => x - y), 'in address order');
    assert.deepEqual([...a.podCidrs()].sort(), (await a.affineBlocks()).sort());

    await a.releaseOwner('p4');
    assert.deepEqual(await a.releaseEmptyBlocks(), [fifth.cidr]);
    assert.equal(seen.count, 3);
    assert.deepEqual(a.podCidrs(), [first.cidr]);
    seen.off();
    await a.allocate({ owner: 'p5', family: 4 });
    assert.equal(seen.count, 3, 'unsubscribed');

    // A restarted allocator knows its blocks before allocating anything.
    await a.stop();
    running.splice(running.indexOf(a), 1);
    const again = make();
    const seenAgain = counter(again);
    await started(again);
    assert.deepEqual(new Set(again.podCidrs()), new Set(await again.affineBlocks()));
    assert.equal(again.podCidrs().length, 2);
    assert.equal(seenAgain.count, 1);
  });

  it('block: a listener that throws does not break allocation', async () => {
    const a = await started(new BlockAllocator({ backend: kv, host: 'node-a', pools: [{ name: 'small', cidr: '10.70.0.0/28', blockSize: 30 }], routerAddress: false, logger: quietLogger }));
    a.onPodCidrsChanged(() => {
      throw new Error('listener bug');
    });
    const x = await a.allocate({ owner: 'p0', family: 4 });
    assert.deepEqual(a.podCidrs(), [x.cidr]);
  });

  it('delegated: none (the plugin’s ranges are not the node’s to announce)', () => {
    const d = new DelegatedAllocator({
      backend: kv,
      host: 'node-a',
      cniPath: ['/nonexistent'],
      netconf: { cniVersion: '1.0.0', name: 'hl', ipam: { type: 'host-local', ranges: [[{ subnet: '10.60.0.0/24' }]] } },
      logger: quietLogger,
    });
    assert.deepEqual(d.podCidrs(), []);
    assert.equal((d as Allocator).onPodCidrsChanged, undefined);
  });
});
