import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../logging/logger.js';
import { openBackend } from '../../kvstore/factory.js';
import type { Backend } from '../../kvstore/types.js';

/**
 * Stand-ins for several agents in one test process: each "node" gets its own
 * kvstore client (etcd: one connection per node, as separate agents have) or a
 * share of one embedded store (it allows a single opener). Every test uses a
 * fresh key prefix, so suites can share one etcd.
 */
export interface TestStore {
  readonly kind: 'embedded' | 'etcd';
  /** A client for one node. */
  connect(): Promise<Backend>;
  /** Closes every client handed out and removes temp dirs. */
  destroy(): Promise<void>;
}

export const testLogger = createLogger('identity-test', process.env.TENDRIL_LOG_LEVEL ?? 'error');

export function uniquePrefix(what: string): string {
  return `test/${what}/${randomUUID()}/`;
}

/** A client whose close() leaves the shared store open (embedded nodes share one). */
function unclosable(backend: Backend): Backend {
  return new Proxy(backend, {
    get(target, prop, receiver) {
      if (prop === 'close') return async () => undefined;
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

export async function embeddedStore(): Promise<TestStore> {
  const dir = mkdtempSync(join(tmpdir(), 'tendril-identity-'));
  const shared = await openBackend({
    kind: 'embedded',
    options: { 'embedded.leaseCheckInterval': '50ms', 'embedded.synchronous': 'normal' },
    dataDir: dir,
    logger: testLogger,
  });
  return {
    kind: 'embedded',
    connect: async () => unclosable(shared),
    destroy: async () => {
      await shared.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export async function etcdStore(endpoint: string): Promise<TestStore> {
  const clients: Backend[] = [];
  return {
    kind: 'etcd',
    connect: async () => {
      const b = await openBackend({ kind: 'etcd', options: { 'etcd.endpoints': endpoint }, dataDir: '/nonexistent', logger: testLogger });
      clients.push(b);
      return b;
    },
    destroy: async () => {
      for (const c of clients) await c.close();
    },
  };
}

/** Counts calls per backend method, to prove cache hits cost no round trip. */
export function countingBackend(backend: Backend): { backend: Backend; calls: Map<string, number> } {
  const calls = new Map<string, number>();
  const proxy = new Proxy(backend, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        calls.set(String(prop), (calls.get(String(prop)) ?? 0) + 1);
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { backend: proxy, calls };
}

export async function waitFor<T>(what: string, check: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
