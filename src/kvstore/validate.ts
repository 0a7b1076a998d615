import { InvalidArgumentError, InvalidKeyError, ValueTooLargeError } from './errors.js';
import type { Compare, TxnOp, TxnRequest } from './types.js';

/**
 * Input limits shared by every backend, so a write that the embedded store
 * accepts on a laptop is also accepted by etcd in a cluster.
 */

/**
 * etcd's default --max-request-bytes is 1.5 MiB for the whole request; the
 * value limit leaves room for the longest key and the request framing, so a
 * value accepted here is never refused by etcd.
 */
export const MAX_VALUE_BYTES = 1.5 * 1024 * 1024 - 8 * 1024;
/** Far above any key tendril writes (labels are bounded), well below etcd's request limit. */
export const MAX_KEY_BYTES = 4096;
/** etcd's default max operations per transaction (--max-txn-ops). */
export const MAX_TXN_OPS = 128;
/** etcd rejects TTLs above 9000000000 s; tendril's leases are seconds to minutes. */
export const MAX_LEASE_TTL_SECONDS = 1_000_000;

// With the u flag a valid surrogate pair is one code point, so only lone halves match.
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

export function validateKey(key: unknown): asserts key is string {
  if (typeof key !== 'string') throw new InvalidKeyError(`key must be a string, got ${typeof key}`);
  if (key.length === 0) throw new InvalidKeyError('key must not be empty');
  const bytes = Buffer.byteLength(key, 'utf8');
  if (bytes > MAX_KEY_BYTES) throw new InvalidKeyError(`key is ${bytes} bytes, the limit is ${MAX_KEY_BYTES}`);
  // NUL has special range meaning in etcd ("\0" = all keys), and lone UTF-16
  // surrogates cannot round-trip through UTF-8; both would make the backends disagree.
  if (key.includes('\0')) throw new InvalidKeyError('key must not contain NUL');
  if (LONE_SURROGATE.test(key)) throw new InvalidKeyError('key must be well-formed Unicode');
}

/** A prefix for list/watch may be empty (everything); otherwise it follows key rules. */
export function validatePrefix(prefix: unknown): asserts prefix is string {
  if (prefix === '') return;
  validateKey(prefix);
}

/** deletePrefix('') would wipe every node's state; refuse it rather than guess. */
export function validateDeletePrefix(prefix: unknown): asserts prefix is string {
  validateKey(prefix);
}

export function validateValue(value: unknown): asserts value is string {
  if (typeof value !== 'string') throw new InvalidArgumentError(`value must be a string, got ${typeof value}`);
  const bytes = Buffer.byteLength(value, 'utf8');
  if (bytes > MAX_VALUE_BYTES) throw new ValueTooLargeError(bytes, MAX_VALUE_BYTES);
}

export function validateLeaseTtl(ttl: unknown): asserts ttl is number {
  if (typeof ttl !== 'number' || !Number.isInteger(ttl) || ttl < 1 || ttl > MAX_LEASE_TTL_SECONDS) {
    throw new InvalidArgumentError(`lease TTL must be an integer number of seconds in 1..${MAX_LEASE_TTL_SECONDS}`);
  }
}

export function validateLeaseId(id: unknown): asserts id is string {
  if (typeof id !== 'string' || !/^[0-9]{1,20}$/.test(id)) {
    throw new InvalidArgumentError(`lease ID must be a decimal string, got ${JSON.stringify(id)}`);
  }
}

export function validateRevision(revision: unknown, what: string): asserts revision is number {
  if (typeof revision !== 'number' || !Number.isSafeInteger(revision) || revision < 0) {
    throw new InvalidArgumentError(`${what} must be a non-negative integer`);
  }
}

function validateCompare(c: Compare): void {
  validateKey(c.key);
  switch (c.target) {
    case 'value':
      validateValue(c.value);
      break;
    case 'modRevision':
    case 'createRevision':
    case 'version':
      validateRevision(c.value, `compare ${c.target}`);
      break;
    case 'exists':
      if (typeof c.value !== 'boolean') throw new InvalidArgumentError('compare exists needs a boolean value');
      return;
    default:
      throw new InvalidArgumentError(`unknown compare target ${JSON.stringify((c as { target: unknown }).target)}`);
  }
  if (c.op !== undefined && !['==', '!=', '<', '>'].includes(c.op)) {
    throw new InvalidArgumentError(`unknown compare op ${JSON.stringify(c.op)}`);
  }
}

function validateOp(op: TxnOp): void {
  switch (op.type) {
    case 'put':
      validateKey(op.key);
      validateValue(op.value);
      if (op.lease !== undefined) validateLeaseId(op.lease);
      return;
    case 'delete':
      validateKey(op.key);
      return;
    case 'deletePrefix':
      validateDeletePrefix(op.prefix);
      return;
    default:
      throw new InvalidArgumentError(`unknown txn op ${JSON.stringify((op as { type: unknown }).type)}`);
  }
}

export function validateTxn(req: TxnRequest): void {
  if (!Array.isArray(req.compare) || !Array.isArray(req.success)) {
    throw new InvalidArgumentError('txn needs compare and success arrays');
  }
  const failure = req.failure ?? [];
  if (!Array.isArray(failure)) throw new InvalidArgumentError('txn failure must be an array');
  if (req.compare.length > MAX_TXN_OPS || req.success.length > MAX_TXN_OPS || failure.length > MAX_TXN_OPS) {
    throw new InvalidArgumentError(`txn has more than ${MAX_TXN_OPS} compares or operations in one branch`);
  }
  req.compare.forEach(validateCompare);
  req.success.forEach(validateOp);
  failure.forEach(validateOp);
  // etcd refuses a txn that writes one key twice ("duplicate key given in txn
  // request"); the embedded store does the same so code is portable.
  for (const branch of [req.success, failure]) {
    const seen = new Set<string>();
    const prefixes = branch.flatMap((op) => (op.type === 'deletePrefix' ? [op.prefix] : []));
    for (const op of branch) {
      if (op.type === 'deletePrefix') continue;
      if (seen.has(op.key) || (op.type === 'put' && prefixes.some((p) => op.key.startsWith(p)))) {
        throw new InvalidArgumentError(`txn writes key ${JSON.stringify(op.key)} twice`);
      }
      seen.add(op.key);
    }
  }
}

/**
 * End of the half-open key range [prefix, end) that holds every key starting
 * with prefix, in UTF-8 byte order (= code point order), or undefined when the
 * range is unbounded (empty prefix). Mirrors etcd's GetPrefixRangeEnd.
 */
export function prefixRangeEnd(prefix: string): string | undefined {
  const cps = Array.from(prefix);
  while (cps.length > 0) {
    const last = cps.pop() as string;
    const cp = last.codePointAt(0) as number;
    let next = cp + 1;
    if (next === 0xd800) next = 0xe000; // skip the surrogate block, not valid scalar values
    if (next <= 0x10ffff) return cps.join('') + String.fromCodePoint(next);
  }
  return undefined;
}
