/**
 * Kubernetes objects as the API server holds them, for the fake API server of
 * unit tests, e2e scenes and benches alike: plain literals with the fields a
 * cluster fills in, so that what the agent reads from the fake looks like what
 * it reads from a real cluster. Pure on purpose (no imports): unit tests and
 * bench workers load it without the root-only helpers of the e2e scenes.
 */

export type Labels = Record<string, string>;

/** A Namespace; `kubernetes.io/metadata.name` is the label the API server sets on every namespace. */
export function namespaceObject(name: string, labels: Labels = {}): object {
  return { apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { 'kubernetes.io/metadata.name': name, ...labels } }, spec: { finalizers: ['kubernetes'] }, status: { phase: 'Active' } };
}

export interface PodObject {
  apiVersion: 'v1';
  kind: 'Pod';
  metadata: { name: string; namespace: string; labels: Labels; uid?: string; resourceVersion?: string };
  spec: { nodeName: string; serviceAccountName: string; containers: Array<{ name: string; image: string; ports?: ContainerPort[] }> };
  status: { phase: string; podIP?: string; podIPs?: Array<{ ip: string }>; hostIP?: string };
}

export interface ContainerPort {
  containerPort: number;
  protocol: 'TCP' | 'UDP';
}

/**
 * A pod scheduled to `nodeName` (one container); with `ip`, running as the
 * kubelet reports it once the sandbox is networked, else still pending.
 */
export function podObject(p: { namespace: string; name: string; nodeName: string; labels: Labels; serviceAccount?: string; ports?: ContainerPort[]; ip?: string; hostIP?: string }): PodObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: p.name, namespace: p.namespace, labels: p.labels },
    spec: {
      nodeName: p.nodeName,
      // The API server's default when a pod names none.
      serviceAccountName: p.serviceAccount ?? 'default',
      containers: [{ name: 'main', image: 'registry.invalid/tdl:1', ...(p.ports ? { ports: p.ports } : {}) }],
    },
    status: p.ip ? { phase: 'Running', podIP: p.ip, podIPs: [{ ip: p.ip }], ...(p.hostIP ? { hostIP: p.hostIP } : {}) } : { phase: 'Pending' },
  };
}

export interface NodeAddress {
  type: string;
  address: string;
}

/** A ready Node; no `podCidrs`: a node the controller manager gave no pod CIDR (`--ipam kubernetes` refuses it). */
export function nodeObject(name: string, podCidrs: readonly string[] | undefined, addresses: readonly NodeAddress[]): object {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, labels: { 'kubernetes.io/hostname': name, 'kubernetes.io/os': 'linux' } },
    spec: podCidrs && podCidrs.length > 0 ? { podCIDR: podCidrs[0], podCIDRs: [...podCidrs] } : {},
    status: { addresses: [...addresses], conditions: [{ type: 'Ready', status: 'True' }] },
  };
}

/** A networking.k8s.io/v1 NetworkPolicy; `spec` as the API takes it (its type kept: tests spoil a copy's fields). */
export function networkPolicyObject<S extends object>(namespace: string, name: string, spec: S): { apiVersion: 'networking.k8s.io/v1'; kind: 'NetworkPolicy'; metadata: { name: string; namespace: string }; spec: S } {
  return { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name, namespace }, spec };
}

/** The CRDs take one rule (`spec`) or several (`specs`): a list given here becomes `specs`. */
const tendrilSpec = (spec: object | readonly object[]) => (Array.isArray(spec) ? { specs: spec } : { spec });

/** A tendril.io/v1 TendrilNetworkPolicy. */
export function tendrilPolicyObject(namespace: string, name: string, spec: object | readonly object[]): object {
  return { apiVersion: 'tendril.io/v1', kind: 'TendrilNetworkPolicy', metadata: { name, namespace }, ...tendrilSpec(spec) };
}

/** A tendril.io/v1 TendrilClusterwideNetworkPolicy (cluster-scoped: no namespace). */
export function tendrilClusterwidePolicyObject(name: string, spec: object | readonly object[]): object {
  return { apiVersion: 'tendril.io/v1', kind: 'TendrilClusterwideNetworkPolicy', metadata: { name }, ...tendrilSpec(spec) };
}

export interface ServicePortSpec {
  name: string;
  port: number;
  targetPort: number;
  protocol?: 'TCP' | 'UDP';
  nodePort?: number;
}

/** A single-stack IPv4 Service with the fields the API server defaults filled in. */
export function serviceObject(
  namespace: string,
  name: string,
  o: { clusterIP: string; ports: ServicePortSpec[]; selector?: Labels; type?: 'ClusterIP' | 'NodePort' | 'LoadBalancer'; sessionAffinity?: 'None' | 'ClientIP'; externalIPs?: string[]; loadBalancerIPs?: string[] },
): object {
  // An IPv6 clusterIP makes an IPv6 single-stack Service, as the API server fills in ipFamilies from it.
  const family = o.clusterIP.includes(':') ? 'IPv6' : 'IPv4';
  const external = o.type === 'NodePort' || o.type === 'LoadBalancer' || (o.externalIPs ?? []).length > 0;
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace },
    spec: {
      type: o.type ?? 'ClusterIP',
      clusterIP: o.clusterIP,
      clusterIPs: [o.clusterIP],
      ipFamilies: [family],
      ipFamilyPolicy: 'SingleStack',
      selector: o.selector ?? {},
      sessionAffinity: o.sessionAffinity ?? 'None',
      ...(o.sessionAffinity === 'ClientIP' ? { sessionAffinityConfig: { clientIP: { timeoutSeconds: 10800 } } } : {}),
      internalTrafficPolicy: 'Cluster',
      ...(external ? { externalTrafficPolicy: 'Cluster' } : {}),
      ...(o.externalIPs ? { externalIPs: o.externalIPs } : {}),
      ports: o.ports.map((p) => ({ name: p.name, port: p.port, targetPort: p.targetPort, protocol: p.protocol ?? 'TCP', ...(p.nodePort !== undefined ? { nodePort: p.nodePort } : {}) })),
    },
    status: { loadBalancer: o.loadBalancerIPs ? { ingress: o.loadBalancerIPs.map((ip) => ({ ip, ipMode: 'VIP' })) } : {} },
  };
}

export interface EndpointConditions {
  ready: boolean;
  serving: boolean;
  terminating: boolean;
}

/** One address of an EndpointSlice. */
export interface SliceEndpointSpec {
  ip: string;
  nodeName?: string;
  /** The pod behind the address (targetRef); `uid` as the API server gave it, when known. */
  pod?: { namespace: string; name: string; uid?: string };
  /** Default: ready and serving, not terminating. */
  conditions?: EndpointConditions;
}

export interface SlicePortSpec {
  name: string;
  port: number;
  protocol?: 'TCP' | 'UDP';
}

/** An EndpointSlice of a service (label kubernetes.io/service-name), as the EndpointSlice controller writes it. */
export function endpointSliceObject(
  namespace: string,
  name: string,
  service: string,
  endpoints: readonly SliceEndpointSpec[],
  ports: readonly SlicePortSpec[],
  addressType: 'IPv4' | 'IPv6' = 'IPv4',
): object {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace, labels: { 'kubernetes.io/service-name': service, 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' } },
    addressType,
    endpoints: endpoints.map((e) => ({
      addresses: [e.ip],
      conditions: e.conditions ?? { ready: true, serving: true, terminating: false },
      ...(e.nodeName !== undefined ? { nodeName: e.nodeName } : {}),
      ...(e.pod ? { targetRef: { kind: 'Pod', namespace: e.pod.namespace, name: e.pod.name, ...(e.pod.uid !== undefined ? { uid: e.pod.uid } : {}) } } : {}),
    })),
    ports: ports.map((p) => ({ name: p.name, port: p.port, protocol: p.protocol ?? 'TCP' })),
  };
}
