import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createAllocator } from './config.js';
import { IpamErrorCode } from './errors.js';
import { embeddedBackend } from './testing/backends.js';
import { quietLogger } from './testing/subjects.js';

describe('ipam config', () => {
  it('builds each mode and rejects bad input with IPAM_INVALID_CONFIG / IPAM_INVALID_CIDR', async () => {
    const tb = await embeddedBackend();
    const deps = { backend: tb.backend, host: 'n1', logger: quietLogger };
    try {
      assert.equal(createAllocator({ mode: 'host-scope', podCIDRs: ['10.0.0.0/24'] }, deps).mode, 'host-scope');
      assert.equal(createAllocator({ mode: 'cluster-pool', clusterPoolCIDRs: ['10.0.0.0/16'], clusterPoolIPv4MaskSize: 24 }, deps).mode, 'cluster-pool');
      const block = createAllocator({ mode: 'block', pools: [{ cidr: '10.1.0.0/16', blockSize: 26 }], strictAffinity: true }, deps);
      assert.equal(block.mode, 'block');
      await block.start();
      assert.ok(block.routerAddress(4)?.cidr.endsWith('/26'));
      await block.stop();
      assert.equal(
        createAllocator({ mode: 'delegated', netconf: { cniVersion: '1.0.0', name: 'x', ipam: { type: 'host-local' } }, cniPath: ['/usr/lib/cni'] }, deps).mode,
        'delegated',
      );
      const bad = [{ mode: 'nope' }, { mode: 'host-scope', podCIDRs: [] }, { mode: 'block', pools: [{ cidr: '10.0.0.0/8' }], extra: 1 }];
      for (const cfg of bad) assert.throws(() => createAllocator(cfg, deps), (e: { code?: string }) => e.code === IpamErrorCode.INVALID_CONFIG, JSON.stringify(cfg));
      assert.throws(() => createAllocator({ mode: 'host-scope', podCIDRs: ['10.0.0.1/24'] }, deps), (e: { code?: string }) => e.code === IpamErrorCode.INVALID_CIDR);
      assert.throws(
        () => createAllocator({ mode: 'block', pools: [{ cidr: '10.0.0.0/16' }, { cidr: '10.0.128.0/17' }] }, deps),
        (e: { code?: string }) => e.code === IpamErrorCode.INVALID_CONFIG,
        'overlapping pools',
      );
    } finally {
      await tb.backend.close();
      await tb.cleanup();
    }
  });
});
