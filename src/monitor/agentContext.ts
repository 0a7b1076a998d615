import { RuleCookieIndex } from '../datapath/bpf/ruleCookie.js';
import type { Policy, RuleOrigin } from '../policy/index.js';
import type { MonitorContext } from './decode.js';
import { InterfaceNames } from './interfaceNames.js';

/** Every peer rule's origin in these policies: what a policy map cookie can stand for. */
export function policyRuleOrigins(policies: Iterable<Policy>): RuleOrigin[] {
  const out: RuleOrigin[] = [];
  for (const p of policies) {
    for (const r of p.rules) {
      for (const d of [r.ingress, r.egress]) {
        for (const pr of d.allow) out.push(pr.origin);
        for (const pr of d.deny) out.push(pr.origin);
      }
    }
  }
  return out;
}

export interface AgentMonitorSources {
  identityLabels(identity: number): readonly string[] | undefined;
  /** The policies in force and their revision (the cookie index is rebuilt when it moves). */
  policies(): readonly Policy[];
  policyRevision(): number;
  /** The rules that put an endpoint's direction into default deny; undefined for an endpoint the agent does not know. */
  enforcedBy?(endpointId: number, direction: 'ingress' | 'egress', staged?: boolean): readonly RuleOrigin[] | undefined;
  interfaces?: InterfaceNames;
  endpointPod?(endpointId: number): { namespace: string; name: string } | undefined;
  serviceName?(id: number): string | undefined;
}

/**
 * The rule cookie index of the current policies, rebuilt only when the
 * policy revision changes (an import or delete), not per event.
 */
export class CurrentRuleIndex {
  #index: RuleCookieIndex | undefined;
  #revision = -1;

  constructor(private readonly sources: Pick<AgentMonitorSources, 'policies' | 'policyRevision'>) {}

  get(): RuleCookieIndex {
    const revision = this.sources.policyRevision();
    if (this.#index === undefined || revision !== this.#revision) {
      this.#index = new RuleCookieIndex(policyRuleOrigins(this.sources.policies()));
      this.#revision = revision;
    }
    return this.#index;
  }
}

/** What the monitor resolves events against, in the agent. */
export function agentMonitorContext(sources: AgentMonitorSources): MonitorContext {
  const interfaces = sources.interfaces ?? new InterfaceNames();
  const rules = new CurrentRuleIndex(sources);
  return {
    identityLabels: (id) => sources.identityLabels(id),
    interfaceName: (ifindex) => interfaces.name(ifindex),
    refreshInterfaces: () => interfaces.refresh(),
    ruleIndex: () => rules.get(),
    ...(sources.enforcedBy ? { enforcedBy: sources.enforcedBy.bind(sources) } : {}),
    ...(sources.endpointPod ? { endpointPod: sources.endpointPod.bind(sources) } : {}),
    ...(sources.serviceName ? { serviceName: sources.serviceName.bind(sources) } : {}),
  };
}
