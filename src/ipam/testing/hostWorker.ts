/**
 * One "host" of the multi-process block-mode test: a separate process with its
 * own etcd client and BlockAllocator, allocating and releasing at random.
 * argv (never a shell string): <endpoint> <host> <ops> <seed> <strict 0|1> <maxBlocksPerHost> <target live|0=random>
 * It prints "ready" once started and begins when a line arrives on stdin, so
 * that slow module loading on a small machine does not serialise the hosts.
 *
 * Duplicates are detected while they happen, not only at the end: after each
 * allocation the worker creates `ipamtest/held/<ip>` only if absent, and
 * deletes it (if still its own) before releasing. Two holders of one address
 * at the same time would find each other's key. The last line printed is a
 * JSON summary; the worker keeps its live allocations so the parent can
 * compare them with the store.
 */
import { writeSync } from 'node:fs';
import { openBackend } from '../../kvstore/factory.js';
import { createLogger } from '../../logging/logger.js';
import { BlockAllocator } from '../blockAllocator.js';
import { IpamErrorCode, isIpamError } from '../errors.js';
import type { Allocation } from '../types.js';
import { seededRandom } from '../../testing/seededRandom.js';

export const WORKER_POOL = { name: 'mp-pool', cidr: '10.100.0.0/22', blockSize: 28 };
export const HELD_PREFIX = 'ipamtest/held/';


async function main(argv: string[]): Promise<void> {
  const [endpoint, host, opsText, seedText, strictText, maxBlocksText, targetText] = argv as [string, string, string, string, string, string, string];
  const logger = createLogger('ipam-worker', 'error');
  const backend = await openBackend({ kind: 'etcd', options: { 'etcd.endpoints': endpoint }, dataDir: '/tmp', logger });
  const strict = strictText === '1';
  const alloc = new BlockAllocator({ backend, host, pools: [WORKER_POOL], strictAffinity: strict, maxBlocksPerHost: Number(maxBlocksText), routerAddress: false, logger });
  await alloc.start();
  const random = seededRandom(Number(seedText));
  const target = Number(targetText) > 0 ? Number(targetText) : 30 + Math.floor(random() * 30);
  const live = new Map<string, Allocation>();
  const counts = { allocs: 0, releases: 0, releasesByIp: 0, borrowed: 0, exhausted: 0, noFreeBlock: 0, duplicates: 0 };
  let n = 0;
  writeSync(1, 'ready\n');
  await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
  process.stdin.pause();
  const ops = Number(opsText);
  const began = Date.now();
  for (let i = 0; i < ops; i++) {
    const grow = live.size === 0 || (live.size < target ? random() < 0.65 : random() < 0.35);
    if (grow) {
      const owner = `${host}-c${n++}`;
      try {
        const a = await alloc.allocate({ owner, family: 4 });
        counts.allocs += 1;
        if (a.borrowed === true) counts.borrowed += 1;
        const held = await backend.txn({
          compare: [{ key: HELD_PREFIX + a.ip, target: 'exists', value: false }],
          success: [{ type: 'put', key: HELD_PREFIX + a.ip, value: owner }],
        });
        if (!held.succeeded) {
          counts.duplicates += 1;
          writeSync(1, `DUPLICATE ${a.ip} ${owner} held by ${(await backend.get(HELD_PREFIX + a.ip))?.value}\n`);
        }
        live.set(owner, a);
      } catch (err) {
        if (isIpamError(err) && err.code === IpamErrorCode.POOL_EXHAUSTED) counts.exhausted += 1;
        else if (isIpamError(err) && err.code === IpamErrorCode.NO_FREE_BLOCK) counts.noFreeBlock += 1;
        else throw err;
      }
    } else {
      const owners = [...live.keys()];
      const owner = owners[Math.floor(random() * owners.length)]!;
      const a = live.get(owner)!;
      live.delete(owner);
      await backend.txn({ compare: [{ key: HELD_PREFIX + a.ip, target: 'value', value: owner }], success: [{ type: 'delete', key: HELD_PREFIX + a.ip }] });
      if (random() < 0.2) {
        // By IP with the sequence number, as a DELETE /ipam/{ip} carrying it would.
        if (!(await alloc.releaseIp(a.ip, { owner, seq: a.seq }))) throw new Error(`releaseIp ${a.ip} of ${owner} found nothing`);
        counts.releasesByIp += 1;
      } else if ((await alloc.releaseOwner(owner)).length !== 1) {
        throw new Error(`releaseOwner ${owner} released nothing`);
      }
      counts.releases += 1;
    }
  }
  const elapsedMs = Date.now() - began;
  await alloc.stop();
  await backend.close();
  const liveList = [...live.values()].map((a) => ({ owner: a.owner, ip: a.ip, cidr: a.cidr, borrowed: a.borrowed === true }));
  writeSync(1, `${JSON.stringify({ host, strict, elapsedMs, ...counts, stats: alloc.stats(), live: liveList })}\n`);
}

main(process.argv.slice(2)).catch((err: unknown) => {
  writeSync(2, `${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
