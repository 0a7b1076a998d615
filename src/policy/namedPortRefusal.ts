import { PolicyValidationError, type PolicyIssue } from './errors.js';
import { formatPolicyName, type PeerRule, type Policy } from './rule.js';

/**
 * Refuses policies whose port rules name a port (`port: postgres`). The
 * engine resolves a named port against the ports an endpoint declares, but
 * tendril's endpoints declare none yet (neither CNI nor the pod informer
 * carries containerPorts to them), so such a rule would allow nothing while
 * the import reported success. Refused with the port and the reason instead;
 * the caller decides where (the API's import, the Kubernetes watcher).
 */
export function refuseNamedPorts(policies: readonly Policy[]): void {
  const issues: PolicyIssue[] = [];
  policies.forEach((policy, document) => {
    const seen = new Set<string>();
    for (const rule of policy.rules) {
      const peerRules: PeerRule[] = [...rule.ingress.allow, ...rule.ingress.deny, ...rule.egress.allow, ...rule.egress.deny];
      for (const pr of peerRules) {
        if (pr.ports === 'all') continue;
        for (const port of pr.ports) {
          if (port.name === undefined) continue;
          const key = `${pr.origin.path}:${port.name}`;
          if (seen.has(key)) continue;
          seen.add(key);
          issues.push({
            document,
            path: `${pr.origin.path}.ports`,
            message: `named port "${port.name}" in ${formatPolicyName(policy.name)}: tendril does not resolve named ports (its endpoints do not declare container ports), so the rule would allow nothing; give the port number instead`,
          });
        }
      }
    }
  });
  if (issues.length > 0) throw new PolicyValidationError(issues);
}
