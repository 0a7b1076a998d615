/**
 * The agent's one kvstore handle, counting every operation and its result
 * into the metrics. Every subsystem gets the backend from the agent, so
 * wrapping it once where it is opened counts them all. Watches are not
 * counted per event (a watch is one operation that lasts).
 */
import type { Backend } from '../kvstore/types.js';
import type { AgentMetrics } from './agentMetrics.js';

export function countedBackend(backend: Backend, metrics: AgentMetrics): Backend {
  const counted = async <T>(operation: string, run: () => Promise<T>): Promise<T> => {
    try {
      const out = await run();
      metrics.countKvstore(operation, 'success');
      return out;
    } catch (err) {
      metrics.countKvstore(operation, 'error');
      throw err;
    }
  };
  const wrapped: Backend = {
    get kind() {
      return backend.kind;
    },
    get: (key) => counted('get', () => backend.get(key)),
    list: (prefix) => counted('list', () => backend.list(prefix)),
    put: (key, value, options) => counted('put', () => backend.put(key, value, options)),
    delete: (key) => counted('delete', () => backend.delete(key)),
    deletePrefix: (prefix) => counted('deletePrefix', () => backend.deletePrefix(prefix)),
    txn: (request) => counted('txn', () => backend.txn(request)),
    grantLease: (ttl) => counted('grantLease', () => backend.grantLease(ttl)),
    keepAlive: (id) => counted('keepAlive', () => backend.keepAlive(id)),
    revokeLease: (id) => counted('revokeLease', () => backend.revokeLease(id)),
    compact: (revision) => counted('compact', () => backend.compact(revision)),
    watch: (prefix, options, listener) => {
      const w = backend.watch(prefix, options, listener);
      metrics.countKvstore('watch', 'success');
      return w;
    },
    status: () => backend.status(),
    close: () => backend.close(),
  };
  return wrapped;
}
