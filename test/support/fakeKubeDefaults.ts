// The defaults and allocations kube-apiserver applies to the built-in objects
// tendril reads, so that what the agent sees from the fake has the fields a
// real cluster always fills in: a Service gets its type, session affinity,
// port protocols and target ports, IP family fields, a ClusterIP and node
// ports when none were given (allocated from the upper end of the ranges first,
// as the real allocators do since Kubernetes 1.24/1.27, so they stay clear of
// the static addresses tests pick), and keeps them across updates that omit
// them; a taken ClusterIP or node port is refused. EndpointSlice ports default
// to TCP; a Namespace gets its finalizer, phase and `kubernetes.io/metadata.name` label. The service CIDR
// (10.96.0.0/12) and node port range (30000-32767) bound allocation only:
// the fake has no cluster configuration to refuse an address outside them.
import { isIPv6 } from 'node:net';

type Obj = Record<string, unknown>;

/** What other Services already hold. */
export interface ServiceAllocations {
  clusterIps: ReadonlySet<string>;
  nodePorts: ReadonlySet<number>;
}

const SERVICE_CIDR_BASE = (10 << 24) | (96 << 16); // 10.96.0.0/12
const SERVICE_CIDR_SIZE = 1 << 20;
const NODE_PORT_MIN = 30000;
const NODE_PORT_MAX = 32767;

function ipv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

function allocateClusterIp(used: ReadonlySet<string>): string {
  for (let off = SERVICE_CIDR_SIZE - 2; off > 0; off--) {
    const ip = ipv4((SERVICE_CIDR_BASE + off) >>> 0);
    if (!used.has(ip)) return ip;
  }
  throw new Error('range is full');
}

function allocateNodePort(used: ReadonlySet<number>): number {
  for (let p = NODE_PORT_MAX; p >= NODE_PORT_MIN; p--) if (!used.has(p)) return p;
  throw new Error('range is full');
}

function asObject(v: unknown): Obj {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Obj) : {};
}

/** Fills a Service's defaults in place; returns a field error (a 422) when an address is taken. */
export function defaultService(svc: Obj, old: Obj | undefined, used: ServiceAllocations): string | undefined {
  const spec = asObject(svc.spec);
  svc.spec = spec;
  const oldSpec = asObject(old?.spec);
  spec.type ??= 'ClusterIP';
  spec.sessionAffinity ??= 'None';
  const ports = Array.isArray(spec.ports) ? (spec.ports as Obj[]) : [];
  const oldPorts = Array.isArray(oldSpec.ports) ? (oldSpec.ports as Obj[]) : [];
  for (const p of ports) {
    p.protocol ??= 'TCP';
    p.targetPort ??= p.port;
  }
  if (spec.type === 'ExternalName') return undefined;
  if ((spec.clusterIP === undefined || spec.clusterIP === '') && typeof oldSpec.clusterIP === 'string') {
    spec.clusterIP = oldSpec.clusterIP;
    spec.clusterIPs = oldSpec.clusterIPs;
  }
  if (spec.clusterIP === undefined || spec.clusterIP === '') {
    spec.clusterIP = allocateClusterIp(used.clusterIps);
  } else if (spec.clusterIP !== 'None' && spec.clusterIP !== oldSpec.clusterIP && used.clusterIps.has(String(spec.clusterIP))) {
    return `spec.clusterIPs: Invalid value: ["${String(spec.clusterIP)}"]: failed to allocate IP ${String(spec.clusterIP)}: provided IP is already allocated`;
  }
  spec.clusterIPs ??= [spec.clusterIP];
  spec.ipFamilies ??= [spec.clusterIP !== 'None' && isIPv6(String(spec.clusterIP)) ? 'IPv6' : 'IPv4'];
  spec.ipFamilyPolicy ??= 'SingleStack';
  spec.internalTrafficPolicy ??= 'Cluster';
  if (spec.type === 'NodePort' || spec.type === 'LoadBalancer') {
    spec.externalTrafficPolicy ??= 'Cluster';
    const taken = new Set(used.nodePorts);
    for (const [i, p] of ports.entries()) {
      if (p.nodePort === undefined) {
        const before = oldPorts.find((o) => o.port === p.port && (o.protocol ?? 'TCP') === p.protocol);
        p.nodePort = typeof before?.nodePort === 'number' ? before.nodePort : allocateNodePort(taken);
      } else if (taken.has(Number(p.nodePort)) && !oldPorts.some((o) => o.nodePort === p.nodePort)) {
        return `spec.ports[${i}].nodePort: Invalid value: ${String(p.nodePort)}: provided port is already allocated`;
      }
      taken.add(Number(p.nodePort));
    }
  }
  return undefined;
}

export function defaultEndpointSlice(slice: Obj): void {
  if (Array.isArray(slice.ports)) for (const p of slice.ports as Obj[]) p.protocol ??= 'TCP';
}

export function defaultNamespace(ns: Obj): void {
  // The label every namespace carries since Kubernetes 1.22 (immutable, set by the API server): policies select namespaces by name with it.
  const metadata = asObject(ns.metadata);
  ns.metadata = metadata;
  if (typeof metadata.name === 'string') metadata.labels = { ...asObject(metadata.labels), 'kubernetes.io/metadata.name': metadata.name };
  const spec = asObject(ns.spec);
  spec.finalizers ??= ['kubernetes'];
  ns.spec = spec;
  const status = asObject(ns.status);
  status.phase ??= 'Active';
  ns.status = status;
}
