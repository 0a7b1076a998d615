/**
 * The NetworkPolicy tests reach for most: pods labelled app=db accept
 * ingress only from pods labelled app=web of the same namespace, on one TCP
 * port when given.
 */
export function dbFromWebPolicy(opts: { namespace: string; tcpPort?: number }): string {
  return `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: db-from-web, namespace: ${opts.namespace} }
spec:
  podSelector: { matchLabels: { app: db } }
  policyTypes: [Ingress]
  ingress:
    - from: [ { podSelector: { matchLabels: { app: web } } } ]
${opts.tcpPort !== undefined ? `      ports: [ { protocol: TCP, port: ${opts.tcpPort} } ]\n` : ''}`;
}
