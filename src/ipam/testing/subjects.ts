import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Backend } from '../../kvstore/types.js';
import { createLogger } from '../../logging/logger.js';
import { BlockAllocator } from '../blockAllocator.js';
import { ClusterPoolAllocator } from '../clusterPool.js';
import type { AllocatorSubject, NewAllocatorSubject } from '../contract.js';
import { DelegatedAllocator } from '../delegated.js';
import { HostScopeAllocator } from '../hostScope.js';
import type { Allocator, IpFamily } from '../types.js';
import type { TestBackend } from './backends.js';

export const quietLogger = createLogger('ipam-test', 'error');
export const CNI_BIN_DIR = process.env.CNI_BIN_DIR ?? '/usr/lib/cni';

interface Meta {
  families: IpFamily[];
  capacity: number;
  pool: string;
  cidr4: string;
  hasRouter: boolean;
}

/** Wraps "build an allocator over a backend" into a contract subject with restart support. */
export function subjectFor(
  openBackend: () => Promise<TestBackend>,
  make: (backend: Backend, now: () => number) => Allocator,
  meta: Meta,
  extraCleanup: () => void = () => undefined,
): NewAllocatorSubject {
  return async () => {
    const tb = await openBackend();
    let backend = tb.backend;
    // Real time plus a test-controlled offset: timers still fire, and a test can jump past a deadline.
    let offset = 0;
    const now = () => Date.now() + offset;
    let allocator = make(backend, now);
    await allocator.start();
    const subject: AllocatorSubject = {
      get allocator() {
        return allocator;
      },
      async restart() {
        await allocator.stop();
        // The embedded store admits one process at a time: close before reopening, as a restarting agent does.
        await backend.close();
        backend = await tb.reopen();
        allocator = make(backend, now);
        await allocator.start();
        return allocator;
      },
      advance(ms: number) {
        offset += ms;
      },
      ...meta,
      async close() {
        await allocator.stop();
        await backend.close();
        await tb.cleanup();
        extraCleanup();
      },
    };
    return subject;
  };
}

export function hostScopeSubject(open: () => Promise<TestBackend>): NewAllocatorSubject {
  return subjectFor(
    open,
    (backend, now) =>
      new HostScopeAllocator({
        backend,
        now,
        host: 'node-a',
        podCidrs: [{ name: 'node-a-v4', cidr: '10.30.0.0/28' }, { cidr: 'fd00:30::/124' }],
        logger: quietLogger,
      }),
    // /28 = 16 addresses minus network, broadcast and router.
    { families: [4, 6], capacity: 13, pool: 'node-a-v4', cidr4: '10.30.0.0/28', hasRouter: true },
  );
}

export function clusterPoolSubject(open: () => Promise<TestBackend>): NewAllocatorSubject {
  return subjectFor(
    open,
    (backend, now) =>
      new ClusterPoolAllocator({
        backend,
        now,
        host: 'node-a',
        pools: [{ name: 'cluster-v4', cidr: '10.40.0.0/24' }, { name: 'cluster-v6', cidr: 'fd00:40::/120' }],
        maskSize: { 4: 28, 6: 124 },
        logger: quietLogger,
      }),
    { families: [4, 6], capacity: 13, pool: 'cluster-v4', cidr4: '10.40.0.0/24', hasRouter: true },
  );
}

export function blockSubject(open: () => Promise<TestBackend>): NewAllocatorSubject {
  return subjectFor(
    open,
    (backend, now) =>
      new BlockAllocator({
        backend,
        now,
        host: 'node-a',
        pools: [
          { name: 'pool-v4', cidr: '10.50.0.0/28', blockSize: 30, reserved: ['10.50.0.12/30'] },
          { name: 'pool-v6', cidr: 'fd00:50::/120' },
        ],
        logger: quietLogger,
      }),
    // 16 addresses, 4 reserved, 1 router.
    { families: [4, 6], capacity: 11, pool: 'pool-v4', cidr4: '10.50.0.0/28', hasRouter: true },
  );
}

/**
 * host-local with a temp dataDir and a 10-address IPv4 range. IPv4 only: one
 * plugin ADD answers for every configured family at once, which the contract's
 * one-address-per-allocate checks do not model; delegated.test.ts covers dual-stack.
 */
export function delegatedSubject(open: () => Promise<TestBackend>): NewAllocatorSubject {
  const dataDir = mkdtempSync(join(tmpdir(), 'tendril-hostlocal-'));
  let seq = 0;
  return async () => {
    // Each subject gets its own dataDir so host-local's state starts empty like the kvstore's.
    const dir = join(dataDir, String(++seq));
    return subjectFor(
      open,
      (backend, now) =>
        new DelegatedAllocator({
          backend,
          now,
          host: 'node-a',
          cniPath: [CNI_BIN_DIR],
          netconf: {
            cniVersion: '1.0.0',
            name: 'hl-net',
            ipam: {
              type: 'host-local',
              dataDir: dir,
              ranges: [[{ subnet: '10.60.0.0/24', rangeStart: '10.60.0.10', rangeEnd: '10.60.0.19', gateway: '10.60.0.1' }]],
            },
          },
          logger: quietLogger,
        }),
      { families: [4], capacity: 10, pool: 'hl-net', cidr4: '10.60.0.0/24', hasRouter: false },
      () => rmSync(dir, { recursive: true, force: true }),
    )();
  };
}
