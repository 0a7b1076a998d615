import { Serializer } from '../async/keyedSerializer.js';
import type { AllocateRequest, Allocation, Allocator, GcOptions, GcReport, IpFamily, IpamStats, ReleaseIpOptions } from './types.js';

/**
 * Runs one agent's writes to an allocator one at a time. The allocators are
 * safe under concurrency through kvstore CAS, but on one node every pod
 * competes for the same block, so concurrent ADDs would mostly burn CAS
 * retries; a local queue turns that contention into a cheap wait. Other
 * nodes still race through CAS as before.
 */
export class SerialAllocator implements Allocator {
  private readonly queue = new Serializer();

  constructor(private readonly inner: Allocator) {}

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    return this.queue.run(fn);
  }

  get mode() {
    return this.inner.mode;
  }
  get host() {
    return this.inner.host;
  }
  start(): Promise<void> {
    return this.inner.start();
  }
  stop(): Promise<void> {
    return this.inner.stop();
  }
  allocate(req: AllocateRequest): Promise<Allocation> {
    return this.serial(() => this.inner.allocate(req));
  }
  /** The inner allocator's allocateAll, or its allocate family by family (not all or none then). */
  allocateAll(reqs: readonly AllocateRequest[]): Promise<Allocation[]> {
    return this.serial(async () => {
      if (this.inner.allocateAll) return this.inner.allocateAll(reqs);
      const out: Allocation[] = [];
      for (const r of reqs) out.push(await this.inner.allocate(r));
      return out;
    });
  }
  confirm(owner: string): Promise<boolean> {
    return this.serial(() => this.inner.confirm(owner));
  }
  releaseOwner(owner: string): Promise<Allocation[]> {
    return this.serial(() => this.inner.releaseOwner(owner));
  }
  releaseIp(ip: string, opts?: ReleaseIpOptions): Promise<boolean> {
    return this.serial(() => this.inner.releaseIp(ip, opts));
  }
  get(owner: string): Promise<Allocation[]> {
    return this.inner.get(owner);
  }
  list(): Promise<Allocation[]> {
    return this.inner.list();
  }
  routerAddress(family: IpFamily): Allocation | undefined {
    return this.inner.routerAddress(family);
  }
  expire(): Promise<Allocation[]> {
    return this.serial(() => this.inner.expire());
  }
  gc(liveOwners: ReadonlySet<string>, opts?: GcOptions): Promise<GcReport> {
    return this.serial(() => this.inner.gc(liveOwners, opts));
  }
  stats(): IpamStats {
    return this.inner.stats();
  }
  podCidrs(): string[] {
    return this.inner.podCidrs();
  }
  onPodCidrsChanged(cb: () => void): () => void {
    return this.inner.onPodCidrsChanged?.(cb) ?? (() => undefined);
  }
}
