/**
 * /v1/kvstore/keys and /v1/kvstore/key: reads of the agent's own kvstore.
 * The embedded store has one opener (storeLock.ts), the running agent, so
 * `tendril kvstore list|get` read through here while it runs. Read-only on
 * purpose: a write behind the agent's back would skip what it keeps in step
 * with the store (IPAM, identities, policies).
 */
import type { FastifyInstance } from 'fastify';
import { AgentError } from '../errors.js';
import type { QueryParams, ResponseBody } from '../types.js';
import { isKvstoreError } from '../../kvstore/errors.js';
import type { Backend } from '../../kvstore/types.js';

/** What the routes read: the agent's backend, reads only. */
export type KvstoreReadApi = Pick<Backend, 'get' | 'list'>;

/** A key the store refuses (too long, empty) is the request's fault, an unreachable store a retry's; anything else is the agent's. */
async function reading<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (isKvstoreError(err) && (err.code === 'KVSTORE_INVALID_KEY' || err.code === 'KVSTORE_INVALID_ARGUMENT')) throw new AgentError('INVALID_REQUEST', `${err.code}: ${err.message}`);
    if (isKvstoreError(err) && err.code === 'KVSTORE_UNAVAILABLE') throw new AgentError('NOT_READY', `${err.code}: ${err.message}`);
    throw err;
  }
}

export function registerKvstoreRoutes(app: FastifyInstance, kvstore: KvstoreReadApi | undefined): void {
  app.get('/v1/kvstore/keys', async (req): Promise<ResponseBody<'listKvstoreKeys', 200>> => {
    if (!kvstore) throw new AgentError('NOT_FOUND', 'this agent serves no kvstore reads');
    const { prefix } = req.query as QueryParams<'listKvstoreKeys'>;
    const res = await reading(() => kvstore.list(prefix ?? ''));
    return { revision: res.revision, kvs: res.kvs };
  });

  app.get('/v1/kvstore/key', async (req): Promise<ResponseBody<'getKvstoreKey', 200>> => {
    if (!kvstore) throw new AgentError('NOT_FOUND', 'this agent serves no kvstore reads');
    const { key } = req.query as QueryParams<'getKvstoreKey'>;
    const kv = await reading(() => kvstore.get(key));
    if (kv === undefined) throw new AgentError('NOT_FOUND', `key "${key}" not found`);
    return kv;
  });
}
