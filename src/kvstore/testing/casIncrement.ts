import type { Backend } from '../types.js';

/**
 * Read-modify-write guarded by a CAS on modRevision, retried on conflict: the
 * pattern identity and IPAM allocation use. Returns how many retries it took.
 */
export async function casIncrement(backend: Backend, key: string): Promise<number> {
  for (let attempt = 0; ; attempt++) {
    const kv = await backend.get(key);
    const current = kv === undefined ? 0 : Number(kv.value);
    const res = await backend.txn({
      compare: [kv === undefined ? { key, target: 'exists', value: false } : { key, target: 'modRevision', value: kv.modRevision }],
      success: [{ type: 'put', key, value: String(current + 1) }],
    });
    if (res.succeeded) return attempt;
  }
}
