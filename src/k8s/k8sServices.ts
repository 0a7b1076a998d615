/**
 * A Kubernetes Service and its EndpointSlices (discovery.k8s.io/v1) as
 * tendril services: one per frontend, as Cilium's agent and kube-proxy
 * read them. Pure: IDs, the service API and logging are the caller's.
 */
import type { V1Endpoint, V1EndpointSlice, V1Service, V1ServicePort } from '@kubernetes/client-node';
import { compareIp, formatIp, formatPrefix, type IpFamily, parseIp, tryParseIp, tryParsePrefix } from '../netip/index.js';
import type { BackendAddress, ServiceFlags, ServiceSpec, ServiceType, TrafficPolicy } from '../service/index.js';

/** What a Service's port or address could not become, with why (logged by the caller). */
export interface SkippedPart {
  what: string;
  reason: string;
}

export interface K8sServiceFrontends {
  /** One spec per frontend, in a stable order (ClusterIPs, NodePort, external IPs, LoadBalancer IPs; per port). */
  specs: ServiceSpec[];
  skipped: SkippedPart[];
}

/** `ip:port/PROTO`: the service API's frontend identity. */
export function specFrontendKey(spec: ServiceSpec): string {
  const f = spec['frontend-address'];
  return `${f.ip}:${f.port}/${f.protocol}`;
}

/** An EndpointSlice addressType's family (FQDN slices carry no address a load balancer can translate to). */
const SLICE_FAMILY: Record<string, IpFamily> = { IPv4: 4, IPv6: 6 };
/** A Service's ipFamilies entry's family. */
const SERVICE_FAMILY: Record<string, IpFamily> = { IPv4: 4, IPv6: 6 };

/** Kubernetes' default for a missing sessionAffinityConfig, in seconds. */
const K8S_DEFAULT_AFFINITY_TIMEOUT = 10800;

/**
 * An endpoint's state as a backend's (kube-proxy's reading of the
 * conditions: `ready` unset means ready, `serving` unset means `ready`):
 * ready → active; still serving while terminating → terminating (used only
 * when no backend is active); anything else is no backend.
 */
export function endpointState(e: V1Endpoint): 'active' | 'terminating' | undefined {
  const ready = e.conditions?.ready ?? true;
  const serving = e.conditions?.serving ?? ready;
  const terminating = e.conditions?.terminating ?? false;
  if (ready) return 'active';
  if (serving && terminating) return 'terminating';
  return undefined;
}

/**
 * The backends of one Service port in one family: every slice of that
 * family (addressType IPv4 or IPv6) whose ports carry the port's name (an
 * unnamed slice port is the Service's single unnamed port) and protocol. An endpoint is its first address (the addresses of one
 * endpoint are fungible; kube-proxy and Cilium take the first). The same
 * address and port in two slices (a slice being split or merged) is one
 * backend, in the more serving state. Sorted, so slice order never changes
 * the slots.
 */
export function portBackends(port: V1ServicePort, slices: readonly V1EndpointSlice[], family: IpFamily = 4): BackendAddress[] {
  const name = port.name ?? '';
  const protocol = port.protocol ?? 'TCP';
  const byKey = new Map<string, BackendAddress & { state: 'active' | 'terminating' }>();
  for (const slice of slices) {
    if (SLICE_FAMILY[slice.addressType] !== family) continue;
    const sp = (slice.ports ?? []).find((p) => (p.name ?? '') === name && (p.protocol ?? 'TCP') === protocol);
    // A slice port without a number means "all ports", which a load balancer cannot translate to.
    if (sp?.port === undefined) continue;
    for (const e of slice.endpoints ?? []) {
      const addr = e.addresses?.[0] === undefined ? undefined : tryParseIp(e.addresses[0]);
      const state = endpointState(e);
      // An address of another family than the slice says is no backend of this family's service.
      if (addr?.family !== family || state === undefined) continue;
      const ip = formatIp(addr);
      const key = `${ip}:${sp.port}`;
      const had = byKey.get(key);
      if (had?.state === 'active') continue;
      byKey.set(key, { ip, port: sp.port, state });
    }
  }
  return [...byKey.values()].sort((a, b) => compareIp(parseIp(a.ip), parseIp(b.ip)) || a.port - b.port);
}

function policy(v: string | undefined): TrafficPolicy {
  return v === 'Local' ? 'Local' : 'Cluster';
}

/**
 * Every frontend of a Service with its backends. Headless (clusterIP None)
 * and ExternalName Services have none: nothing load-balances them.
 * ClusterIPs, external and LoadBalancer IPs of both families (one service
 * per family and frontend, each with its family's slices), IPv4 NodePorts
 * on every node address, IPv6 ones on each of the node's IPv6 InternalIPs
 * and TCP/UDP ports are served; the rest is listed in `skipped`. externalTrafficPolicy concerns the frontends reached from
 * outside the node (NodePort, external IPs, LoadBalancer IPs);
 * internalTrafficPolicy every frontend's traffic from inside the node (as
 * Cilium applies it).
 */
/** The label by which a Service names the service proxy that serves it (tendril serves only unlabelled ones). */
export const SERVICE_PROXY_NAME_LABEL = 'service.kubernetes.io/service-proxy-name';

export function k8sServiceFrontends(svc: V1Service, slices: readonly V1EndpointSlice[], node: { ipv6NodePortAddresses?: readonly string[] } = {}): K8sServiceFrontends {
  const out: K8sServiceFrontends = { specs: [], skipped: [] };
  const spec = svc.spec;
  const type = spec?.type ?? 'ClusterIP';
  if (!spec || type === 'ExternalName') return out;
  // A Service another service proxy owns (as kube-proxy and Cilium leave it to that proxy).
  const proxy = svc.metadata?.labels?.[SERVICE_PROXY_NAME_LABEL];
  if (proxy !== undefined) {
    out.skipped.push({ what: 'the Service', reason: `label ${SERVICE_PROXY_NAME_LABEL}=${proxy}: another service proxy serves it` });
    return out;
  }
  const clusterIps = spec.clusterIPs && spec.clusterIPs.length > 0 ? spec.clusterIPs : spec.clusterIP ? [spec.clusterIP] : [];
  if (clusterIps.includes('None') || clusterIps.length === 0) return out;
  const affinity = spec.sessionAffinity === 'ClientIP';
  const baseFlags: Omit<ServiceFlags, 'type'> = {
    internalTrafficPolicy: policy(spec.internalTrafficPolicy),
    ...(affinity ? { sessionAffinity: true, sessionAffinityTimeout: spec.sessionAffinityConfig?.clientIP?.timeoutSeconds ?? K8S_DEFAULT_AFFINITY_TIMEOUT } : {}),
  };
  const externalPolicy = policy(spec.externalTrafficPolicy);
  /*
   * The families the Service has (ipFamilies, set by the API server from
   * ipFamilyPolicy; absent on an old object: its clusterIPs say). A
   * dual-stack Service is one tendril service per family and frontend:
   * IPv4 frontends with the IPv4 slices' backends, IPv6 ones with the IPv6
   * slices'.
   */
  const families = new Set<IpFamily>((spec.ipFamilies ?? []).map((f) => SERVICE_FAMILY[f]).filter((f): f is IpFamily => f !== undefined));
  const familyOf = (ip: string) => tryParseIp(ip)?.family;
  const inFamilies = (what: string, ips: readonly string[]) => {
    const ok: string[] = [];
    for (const ip of ips) {
      const family = familyOf(ip);
      if (family === undefined) out.skipped.push({ what: `${what} ${ip}`, reason: 'not an IP address' });
      else if (families.size > 0 && !families.has(family)) out.skipped.push({ what: `${what} ${ip}`, reason: `IPv${family} is not one of the Service's ipFamilies` });
      else ok.push(formatIp(parseIp(ip)));
    }
    return ok;
  };
  const serviceClusterIps = inFamilies('clusterIP', clusterIps);
  const externalIps = inFamilies('externalIP', spec.externalIPs ?? []);
  const lbIps: string[] = [];
  if (type === 'LoadBalancer') {
    for (const ing of svc.status?.loadBalancer?.ingress ?? []) {
      if (ing.ip === undefined) continue;
      // The load balancer proxies itself (KEP-1860): its address must reach it, not be short-circuited here.
      if (ing.ipMode === 'Proxy') {
        out.skipped.push({ what: `loadBalancer ingress ${ing.ip}`, reason: 'ipMode Proxy: traffic goes through the load balancer' });
        continue;
      }
      lbIps.push(ing.ip);
    }
  }
  const serviceLbIps = inFamilies('loadBalancer ingress', lbIps);
  // loadBalancerSourceRanges, per family as kube-proxy reads them (host bits cleared); a family none is given for takes every source.
  const rangesOf = new Map<IpFamily, string[]>([[4, []], [6, []]]);
  for (const text of spec.loadBalancerSourceRanges ?? []) {
    const p = tryParsePrefix(text.trim(), { hostBits: 'mask' });
    if (p) rangesOf.get(p.family)!.push(formatPrefix(p));
    else if (serviceLbIps.length > 0) out.skipped.push({ what: `loadBalancerSourceRanges ${text}`, reason: 'not a CIDR' });
  }
  for (const port of spec.ports ?? []) {
    const protocol = port.protocol ?? 'TCP';
    const what = `port ${port.name ? `${port.name} ` : ''}${port.port}/${protocol}`;
    if (protocol !== 'TCP' && protocol !== 'UDP') {
      out.skipped.push({ what, reason: `${protocol} services are not supported` });
      continue;
    }
    const backendsOf = new Map<IpFamily, BackendAddress[]>();
    const add = (ip: string, p: number, t: ServiceType, trafficPolicy: TrafficPolicy) => {
      const family = familyOf(ip) ?? 4;
      let backends = backendsOf.get(family);
      if (!backends) backendsOf.set(family, (backends = portBackends(port, slices, family)));
      // loadBalancerSourceRanges are the load balancer's addresses' alone, those of its family.
      const ranges = t === 'LoadBalancer' ? rangesOf.get(family)! : [];
      out.specs.push({
        'frontend-address': { ip, port: p, protocol },
        'backend-addresses': backends.map((b) => ({ ...b })),
        flags: { type: t, ...(trafficPolicy === 'Local' ? { trafficPolicy } : {}), ...baseFlags, ...(ranges.length > 0 ? { sourceRanges: [...ranges] } : {}) },
      });
    };
    for (const ip of serviceClusterIps) add(ip, port.port, 'ClusterIP', 'Cluster');
    if ((type === 'NodePort' || type === 'LoadBalancer') && port.nodePort !== undefined && port.nodePort > 0) {
      // The NodePort on the node's IPv4 addresses, when the Service has IPv4. IPv6 has no "every node
      // address" frontend: its NodePort is served on each of the node's IPv6 InternalIPs (kube-proxy's
      // default --nodeport-addresses serves them all; the InternalIP is where clients are told to go).
      if (serviceClusterIps.some((ip) => familyOf(ip) === 4)) add('0.0.0.0', port.nodePort, 'NodePort', externalPolicy);
      if (serviceClusterIps.some((ip) => familyOf(ip) === 6)) {
        const on6 = node.ipv6NodePortAddresses ?? [];
        for (const ip of on6) add(ip, port.nodePort, 'NodePort', externalPolicy);
        if (on6.length === 0) out.skipped.push({ what: `${what} nodePort ${port.nodePort} on IPv6`, reason: 'the node has no IPv6 InternalIP to serve an IPv6 NodePort on' });
      }
    }
    for (const ip of externalIps) add(ip, port.port, 'ExternalIPs', externalPolicy);
    for (const ip of serviceLbIps) add(ip, port.port, 'LoadBalancer', externalPolicy);
  }
  return out;
}
