import type { LabelSet } from '../labels/index.js';
import { MAX_LOCAL_IDENTITY, MIN_LOCAL_IDENTITY } from './constants.js';
import { IdentityError, IdentityErrorCode } from './errors.js';
import { makeIdentity, type Identity } from './identity.js';

/**
 * Node-local identities (scope bit 1<<24) for label sets that only mean
 * something on this node — CIDR identities, as in Cilium. They never touch
 * the kvstore: every node numbers its CIDRs itself and the datapath never
 * sends a local identity to another node.
 */
export class LocalIdentityAllocator {
  readonly #byLabels = new Map<string, { identity: Identity; refs: number }>();
  readonly #byId = new Map<number, Identity>();
  #next = MIN_LOCAL_IDENTITY;

  allocate(labels: LabelSet, preferredId?: number): { identity: Identity; isNew: boolean } {
    const key = labels.toString();
    const held = this.#byLabels.get(key);
    if (held !== undefined) {
      held.refs++;
      return { identity: held.identity, isNew: false };
    }
    const id = this.#pick(preferredId);
    const identity = makeIdentity(id, labels);
    this.#byLabels.set(key, { identity, refs: 1 });
    this.#byId.set(id, identity);
    return { identity, isNew: true };
  }

  #pick(preferred?: number): number {
    if (preferred !== undefined && preferred >= MIN_LOCAL_IDENTITY && preferred <= MAX_LOCAL_IDENTITY && !this.#byId.has(preferred)) {
      return preferred;
    }
    const span = MAX_LOCAL_IDENTITY - MIN_LOCAL_IDENTITY + 1;
    for (let i = 0; i < span; i++) {
      const n = MIN_LOCAL_IDENTITY + ((this.#next - MIN_LOCAL_IDENTITY + i) % span);
      if (!this.#byId.has(n)) {
        this.#next = n + 1 > MAX_LOCAL_IDENTITY ? MIN_LOCAL_IDENTITY : n + 1;
        return n;
      }
    }
    throw new IdentityError(IdentityErrorCode.EXHAUSTED, 'every node-local identity is taken');
  }

  /** Drops one reference; returns true when it was the last. */
  release(id: number): boolean {
    const identity = this.#byId.get(id);
    if (identity === undefined) {
      throw new IdentityError(IdentityErrorCode.NOT_ALLOCATED, `local identity ${id} is not allocated on this node`);
    }
    const key = identity.labels.toString();
    const held = this.#byLabels.get(key)!;
    held.refs--;
    if (held.refs > 0) return false;
    this.#byLabels.delete(key);
    this.#byId.delete(id);
    return true;
  }

  lookupById(id: number): Identity | undefined {
    return this.#byId.get(id);
  }

  lookupByLabels(labels: LabelSet): Identity | undefined {
    return this.#byLabels.get(labels.toString())?.identity;
  }

  references(id: number): number {
    const identity = this.#byId.get(id);
    return identity === undefined ? 0 : (this.#byLabels.get(identity.labels.toString())?.refs ?? 0);
  }

  list(): Identity[] {
    return [...this.#byId.values()];
  }
}
