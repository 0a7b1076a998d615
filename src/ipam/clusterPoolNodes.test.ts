import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { Backend } from '../kvstore/types.js';
import { ClusterPoolAllocator } from './clusterPool.js';
import { rejectsWithIpamCode } from './contract.js';
import { IpamErrorCode } from './errors.js';
import { HostScopeAllocator } from './hostScope.js';
import { type TestBackend, embeddedBackend } from './testing/backends.js';
import { quietLogger } from './testing/subjects.js';

describe('cluster-pool per-node CIDRs', () => {
  let tb: TestBackend;
  let kv: Backend;
  const node = (host: string) =>
    new ClusterPoolAllocator({ backend: kv, host, pools: [{ name: 'cluster', cidr: '10.80.0.0/26' }, { cidr: 'fd00:80::/120' }], maskSize: { 4: 28, 6: 124 }, logger: quietLogger });

  beforeEach(async () => {
    tb = await embeddedBackend();
    kv = tb.backend;
  });
  afterEach(async () => {
    await kv.close();
    await tb.cleanup();
  });

  it('gives each node its own CIDR, keeps it across restarts and takes the router address first', async () => {
    const a = node('node-a');
    const b = node('node-b');
    await a.start();
    await b.start();
    assert.deepEqual(a.nodeCidrs(), ['10.80.0.0/28', 'fd00:80::/124']);
    assert.deepEqual(b.nodeCidrs(), ['10.80.0.16/28', 'fd00:80::10/124']);
    assert.equal(a.routerAddress(4)?.ip, '10.80.0.1');
    assert.equal(a.routerAddress(6)?.ip, 'fd00:80::1');
    const pod = await b.allocate({ owner: 'pod', family: 4 });
    assert.equal(pod.prefixLength, 28);
    assert.equal(pod.gateway, '10.80.0.17');
    await a.stop();
    const again = node('node-a');
    await again.start();
    assert.deepEqual(again.nodeCidrs(), ['10.80.0.0/28', 'fd00:80::/124']);
    assert.equal(again.routerAddress(4)?.ip, '10.80.0.1');
    await again.stop();
    await b.stop();
  });

  it('fails with IPAM_POOL_EXHAUSTED naming the pool when no per-node CIDR is left, and a removed node returns its CIDR', async () => {
    const nodes = ['n1', 'n2', 'n3', 'n4'].map(node);
    for (const n of nodes) await n.start();
    await rejectsWithIpamCode(node('n5').start(), IpamErrorCode.POOL_EXHAUSTED, 'cluster');
    await nodes[1]!.allocate({ owner: 'pod-on-n2', family: 4 });
    const freed = nodes[1]!.nodeCidrs();
    const report = await nodes[1]!.removeNode();
    assert.deepEqual(report.deletedBlocks.sort(), [...freed].sort());
    assert.ok(report.releasedOwners.includes('pod-on-n2'));
    const n5 = node('n5');
    await n5.start();
    assert.deepEqual(n5.nodeCidrs(), freed);
    for (const n of [nodes[0]!, nodes[2]!, nodes[3]!, n5]) await n.stop();
  });
});

describe('host-scope pod CIDRs', () => {
  let tb: TestBackend;
  beforeEach(async () => {
    tb = await embeddedBackend();
  });
  afterEach(async () => {
    await tb.backend.close();
    await tb.cleanup();
  });

  it('refuses a pod CIDR another host already owns', async () => {
    const a = new HostScopeAllocator({ backend: tb.backend, host: 'a', podCidrs: [{ cidr: '10.90.0.0/24' }], logger: quietLogger });
    await a.start();
    const b = new HostScopeAllocator({ backend: tb.backend, host: 'b', podCidrs: [{ cidr: '10.90.0.0/24' }], logger: quietLogger });
    await rejectsWithIpamCode(b.start(), IpamErrorCode.CONFLICT, 'owned by host a');
    await a.stop();
  });

  it('rejects invalid CIDRs with IPAM_INVALID_CIDR', () => {
    for (const cidr of ['10.0.0.0', '10.0.0.1/24', '300.0.0.0/8', 'fd00::/129']) {
      assert.throws(
        () => new HostScopeAllocator({ backend: tb.backend, host: 'a', podCidrs: [{ cidr }], logger: quietLogger }),
        (e: { code?: string }) => e.code === IpamErrorCode.INVALID_CIDR,
        cidr,
      );
    }
  });

  it('reports the family as unavailable when no CIDR of it is configured', async () => {
    const a = new HostScopeAllocator({ backend: tb.backend, host: 'a', podCidrs: [{ cidr: '10.91.0.0/24' }], logger: quietLogger });
    await a.start();
    await rejectsWithIpamCode(a.allocate({ owner: 'x', family: 6 }), IpamErrorCode.FAMILY_UNAVAILABLE);
    assert.equal(a.routerAddress(6), undefined);
    await a.stop();
  });
});
