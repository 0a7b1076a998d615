/**
 * Resolution of the rules that select one subject (an identity plus its named
 * ports) into L4 filters: (direction, verdict, peer selector or wildcard, port
 * keys). This is the identity-independent half of a policy; the map state is
 * these filters expanded over the identities each selector selects now.
 */
import { PolicyError, PolicyErrorCode } from './errors.js';
import { directionEnforcement, type DirectionEnforcement } from './enforcement.js';
import { portKeysOfRules, usesNamedPorts } from './portRules.js';
import type { PortKey } from './ports.js';
import type { PeerRule, Rule, RuleOrigin } from './rule.js';
import type { CachedSelector, SelectorCache } from './selectorCache.js';
import { DIRECTIONS, type Direction, type EnforcementMode, type NamedPort, type Verdict } from './types.js';

export interface L4Filter {
  readonly direction: Direction;
  readonly verdict: Verdict;
  readonly origin: RuleOrigin;
  /** undefined = every peer (map-state identity 0). */
  readonly selector: CachedSelector | undefined;
  readonly portKeys: readonly PortKey[];
}

export interface ResolvedPolicy {
  readonly enforcement: Readonly<Record<Direction, DirectionEnforcement>>;
  readonly filters: readonly L4Filter[];
  /** Keys of the (non-wildcard) selectors the filters use: identity changes route through these. */
  readonly selectorKeys: ReadonlySet<string>;
  /** Egress rules with named ports depend on the ports every endpoint declares. */
  readonly usesEgressNamedPorts: boolean;
}

export interface ResolveContext {
  readonly mode: EnforcementMode;
  readonly selectorCache: SelectorCache;
  /** Named ports of every local endpoint: egress named ports resolve against the peers'. */
  readonly egressNamedPorts: readonly NamedPort[];
}

/** `selecting`: the rules whose subject selector selects the endpoint's identity. */
export function resolvePolicy(ctx: ResolveContext, selecting: readonly Rule[], ownNamedPorts: readonly NamedPort[]): ResolvedPolicy {
  const filters: L4Filter[] = [];
  const selectorKeys = new Set<string>();
  let usesEgressNamedPorts = false;
  const enforcement = {
    ingress: directionEnforcement(ctx.mode, selecting, 'ingress'),
    egress: directionEnforcement(ctx.mode, selecting, 'egress'),
  };
  if (ctx.mode !== 'never') {
    for (const rule of selecting) {
      for (const direction of DIRECTIONS) {
        const dr = direction === 'ingress' ? rule.ingress : rule.egress;
        const named = direction === 'ingress' ? ownNamedPorts : ctx.egressNamedPorts;
        const add = (pr: PeerRule, verdict: Verdict) => {
          if (direction === 'egress' && usesNamedPorts(pr.ports)) usesEgressNamedPorts = true;
          const portKeys = portKeysOfRules(pr.ports, named);
          if (portKeys.length === 0) return;
          if (pr.peers === 'all') {
            filters.push({ direction, verdict, origin: pr.origin, selector: undefined, portKeys });
            return;
          }
          for (const sel of pr.peers) {
            if (sel.wildcard) {
              filters.push({ direction, verdict, origin: pr.origin, selector: undefined, portKeys });
              continue;
            }
            const cached = ctx.selectorCache.get(sel.key);
            if (cached === undefined) throw new PolicyError(PolicyErrorCode.INTERNAL, `selector ${sel.key} is not in the selector cache (policy ${pr.origin.policy})`);
            selectorKeys.add(sel.key);
            filters.push({ direction, verdict, origin: pr.origin, selector: cached, portKeys });
          }
        };
        for (const pr of dr.allow) add(pr, 'allow');
        for (const pr of dr.deny) add(pr, 'deny');
      }
    }
  }
  return { enforcement, filters, selectorKeys, usesEgressNamedPorts };
}
