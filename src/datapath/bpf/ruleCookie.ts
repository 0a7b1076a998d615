/**
 * Rule cookies: the 32-bit number a policy map entry carries so that a drop
 * or verdict in the datapath names the rule that decided it. A cookie is a
 * hash of the rule's origin (policy and field path), so it needs no table
 * that would have to survive the agent: whoever knows the policies can
 * resolve it again (RuleCookieIndex). Values below MIN_RULE_COOKIE are the
 * datapath's reserved cookies (no rule, not enforced, allow-localhost).
 */
import { MIN_RULE_COOKIE } from './constants.js';
import type { RuleOrigin } from '../../policy/index.js';

/** FNV-1a over the UTF-8 bytes, 32 bits. */
function fnv1a32(text: string): number {
  let h = 0x811c9dc5;
  for (const byte of Buffer.from(text, 'utf8')) {
    h ^= byte;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

export function ruleCookie(origin: RuleOrigin): number {
  const h = fnv1a32(`${origin.policy}\u0000${origin.path}`);
  return h < MIN_RULE_COOKIE ? h + MIN_RULE_COOKIE : h;
}

/** Cookie → the origins that hash to it (a collision lists both). */
export class RuleCookieIndex {
  readonly #byCookie = new Map<number, RuleOrigin[]>();

  constructor(origins: Iterable<RuleOrigin>) {
    for (const o of origins) {
      const c = ruleCookie(o);
      const list = this.#byCookie.get(c);
      if (list === undefined) this.#byCookie.set(c, [o]);
      else if (!list.some((x) => x.policy === o.policy && x.path === o.path)) list.push(o);
    }
  }

  resolve(cookie: number): readonly RuleOrigin[] {
    return this.#byCookie.get(cookie) ?? [];
  }
}
