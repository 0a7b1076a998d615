import { setTimeout as sleep } from 'node:timers/promises';
import { Backoff } from '../async/backoff.js';
import { IpamError, IpamErrorCode } from './errors.js';
import type { IpamStats } from './types.js';

/** Returned by a CAS attempt whose transaction lost a race: read again and retry. */
export const RETRY = Symbol('ipam.retry');

export const DEFAULT_MAX_RETRIES = 30;

export function newStats(): IpamStats {
  return { allocations: 0, releases: 0, expired: 0, casRetries: 0, casGiveUps: 0, blocksClaimed: 0, blocksReleased: 0, borrowed: 0 };
}

/**
 * Runs a read-compute-txn attempt until it commits, at most `maxRetries`
 * extra times. Every lost race is counted, so contention is visible in
 * stats(); giving up is an IPAM_CONFLICT rather than an endless loop. After a
 * few losses it backs off with jitter: with many hosts hitting one key,
 * retrying immediately only loses again.
 */
export async function casLoop<T>(stats: IpamStats, what: string, maxRetries: number, attempt: () => Promise<T | typeof RETRY>): Promise<T> {
  // From the third lost race on: 4 ms, doubling up to 50 ms, each a random part of that.
  const backoff = new Backoff({ initialMs: 4, maxMs: 50, jitter: 'full' });
  for (let i = 0; ; i++) {
    const r = await attempt();
    if (r !== RETRY) return r;
    if (i >= maxRetries) {
      stats.casGiveUps += 1;
      throw new IpamError(IpamErrorCode.CONFLICT, `${what}: gave up after ${maxRetries} lost compare-and-swap races`);
    }
    stats.casRetries += 1;
    if (i >= 2) await sleep(backoff.next());
  }
}
