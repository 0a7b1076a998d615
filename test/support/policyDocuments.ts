/** Policy documents for e2e tests: a spec written as YAML lines, wrapped in its kind's header. */

function document(apiVersion: string, kind: string, ns: string, name: string, spec: string): string {
  const body = spec
    .trim()
    .split('\n')
    .map((l) => `  ${l}`)
    .join('\n');
  return `apiVersion: ${apiVersion}\nkind: ${kind}\nmetadata: {name: ${name}, namespace: ${ns}}\nspec:\n${body}\n---\n`;
}

/** A Kubernetes NetworkPolicy. */
export function networkPolicy(ns: string, name: string, spec: string): string {
  return document('networking.k8s.io/v1', 'NetworkPolicy', ns, name, spec);
}

/** A tendril (CiliumNetworkPolicy-like) policy. */
export function tendrilPolicy(ns: string, name: string, spec: string): string {
  return document('tendril.io/v1', 'TendrilNetworkPolicy', ns, name, spec);
}
