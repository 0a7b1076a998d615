/**
 * A rule's port list in the two forms the engine needs: map-state PortKeys
 * (policyMapEntries) and a direct "does this packet match" (trace and the
 * reference evaluator). Both resolve named ports the same way, so they agree.
 */
import { ANY_PORT_KEY, MAX_PORT, portKeysFor, type PortKey } from './ports.js';
import type { PortRule } from './rule.js';
import { PORT_PROTOCOLS, protocolNumber, type NamedPort } from './types.js';

/** Ports a named port stands for: declared ports of that name whose protocol fits the rule's. */
export function resolveNamedPort(rule: PortRule, named: readonly NamedPort[]): Array<{ proto: number; port: number }> {
  const out: Array<{ proto: number; port: number }> = [];
  for (const np of named) {
    if (np.name !== rule.name) continue;
    if (rule.protocol !== 'ANY' && rule.protocol !== np.protocol) continue;
    out.push({ proto: protocolNumber(np.protocol), port: np.port });
  }
  return out;
}

function uniqueKeys(keys: PortKey[]): PortKey[] {
  const seen = new Map<string, PortKey>();
  for (const k of keys) seen.set(`${k.proto}/${k.port}/${k.prefixLen}`, k);
  return [...seen.values()];
}

/** Map-state port keys for a rule's ports ('all' = any protocol, any port). Unresolvable named ports yield nothing. */
export function portKeysOfRules(ports: readonly PortRule[] | 'all', named: readonly NamedPort[]): PortKey[] {
  if (ports === 'all') return [ANY_PORT_KEY];
  const keys: PortKey[] = [];
  for (const pr of ports) {
    if (pr.name !== undefined) {
      for (const r of resolveNamedPort(pr, named)) keys.push(...portKeysFor(r.proto, r.port, r.port));
      continue;
    }
    const allPorts = pr.port === 0;
    const first = allPorts ? 0 : pr.port;
    const last = allPorts ? MAX_PORT : pr.endPort;
    if (pr.protocol === 'ANY') {
      // Ports exist only for TCP/UDP/SCTP: "ANY" with ports means those three.
      if (allPorts) keys.push(ANY_PORT_KEY);
      else for (const proto of PORT_PROTOCOLS) keys.push(...portKeysFor(proto, first, last));
    } else {
      keys.push(...portKeysFor(protocolNumber(pr.protocol), first, last));
    }
  }
  return uniqueKeys(keys);
}

/** Does a packet (proto, port) match the rule's ports? */
export function portRulesMatch(ports: readonly PortRule[] | 'all', named: readonly NamedPort[], proto: number, port: number): boolean {
  if (ports === 'all') return true;
  return ports.some((pr) => {
    if (pr.name !== undefined) return resolveNamedPort(pr, named).some((r) => r.proto === proto && r.port === port);
    if (pr.protocol === 'ANY') {
      if (pr.port === 0) return true;
      if (!PORT_PROTOCOLS.includes(proto)) return false;
    } else if (protocolNumber(pr.protocol) !== proto) {
      return false;
    }
    return pr.port === 0 || (port >= pr.port && port <= pr.endPort);
  });
}

/** Are there named ports in this list (they depend on which ports endpoints declare)? */
export function usesNamedPorts(ports: readonly PortRule[] | 'all'): boolean {
  return ports !== 'all' && ports.some((p) => p.name !== undefined);
}

