import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { DEFAULT_LIB_DIR, DEFAULT_STATE_DIR } from '../api/types.js';
import { validateAbsolutePath, validateInterfaceName } from '../cni/index.js';
import { MAGLEV_DEFAULT_TABLE_SIZE, TUNNEL_DEFAULT_PORT } from '../datapath/bpf/constants.js';
import { DEFAULT_NAT_PORT_RANGE, isPortRange } from '../datapath/bpf/natPorts.js';
import { ConfigError, ConfigErrorCode } from '../errors/configError.js';
import { ipFamilyOf, tryParseInterfaceAddress } from '../netip/index.js';
import { DEFAULT_MAX_ENTRIES_PER_ENDPOINT } from '../policy/index.js';
import { isValidMaglevTableSize, MAGLEV_MAX_TABLE_SIZE, MAGLEV_MIN_TABLE_SIZE } from '../service/maglev.js';
import { isServeAddress } from '../metrics/metricsServer.js';
import { FLOW_METRICS_LABELS } from '../metrics/flowMetrics.js';
import { checkListenOptions, listenFlags, type ListenAccessFiles } from '../api/server/listenAccess.js';
import { LOG_FORMATS } from '../logging/logger.js';
import { fileErrorReason } from '../errors/fileError.js';

// Defined beside the subsystems that raise or read them; named here too, where the agent's callers look.
export { ConfigError, ConfigErrorCode } from '../errors/configError.js';
export { k8sConnection } from '../k8s/index.js';

/** `kubernetes`: host-scope allocation from the pod CIDRs of the node's Node object (Cilium's kubernetes IPAM mode). */
export const IPAM_MODES = ['host-scope', 'cluster-pool', 'block', 'delegated', 'kubernetes'] as const;
export const IDENTITY_ALLOCATION_MODES = ['kvstore', 'crd'] as const;
/** How long the agent waits for the first sync of the Kubernetes watchers (and its Node) by default. */
export const DEFAULT_K8S_SYNC_TIMEOUT_SECONDS = 60;
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace'] as const;
export const DATAPATH_KINDS = ['bpf', 'routing'] as const;
export const TRACE_LEVELS = ['off', 'new-flows', 'all'] as const;
/** Config keys of the eBPF map sizes, each a map of the datapath. */
export const BPF_MAP_SIZE_KEYS = ['lxc', 'ipcache', 'policy', 'ctTcp', 'ctAny', 'frag', 'events', 'lbServices', 'lbBackends', 'lbRevnat', 'lbAffinity', 'lbMaglev', 'lbMembers', 'snat'] as const;
export const LB_ALGORITHMS = ['random', 'maglev'] as const;
/** How pods reach pods on other nodes (Cilium's names): through the VXLAN overlay, or routed on the underlay. */
export const ROUTING_MODES = ['tunnel', 'native'] as const;
export const TUNNEL_PROTOCOLS = ['vxlan'] as const;
export type BpfMapSizeKey = (typeof BPF_MAP_SIZE_KEYS)[number];

// Only the shape is checked here (host bits and "/08" pass, as in a CNI netconf): IPAM and the masquerade setup apply their own rules to the values.
const cidr = z.string().refine((c) => tryParseInterfaceAddress(c, { leadingZeros: true }) !== undefined, { message: 'must be a CIDR such as 10.0.0.0/16' });
const interfaceName = z.string().refine(
  (n) => {
    try {
      validateInterfaceName(n);
      return true;
    } catch {
      return false;
    }
  },
  { message: 'must be an interface name (1..15 bytes, no / : or whitespace)' },
);
const absPath = z.string().refine((p) => p.startsWith('/') && !p.split('/').includes('..'), { message: 'must be an absolute path without ..' });

/** The agent's configuration: YAML file keys and flags share these names. */
export const AgentConfigSchema = z
  .object({
    nodeName: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$/, 'must be a DNS-style name'),
    stateDir: absPath,
    /** Durable data: the embedded kvstore lives under <libDir>/kvstore. */
    libDir: absPath,
    socket: absPath,
    kvstore: z.enum(['embedded', 'etcd']),
    kvstoreOpts: z.record(z.string(), z.string()),
    /**
     * Where cluster-wide state lives (Cilium's --identity-allocation-mode): `kvstore`, the kvstore
     * (etcd for a cluster); `crd`, the Kubernetes API server (TendrilIdentity, TendrilEndpoint and
     * TendrilNode objects, Leases), the kvstore keeping node-local state only. Default: `crd` when
     * the agent follows an API server and no etcd is named; resolved by validateConfig.
     */
    identityAllocationMode: z.enum(IDENTITY_ALLOCATION_MODES),
    ipam: z.enum(IPAM_MODES),
    podCidrs: z.array(cidr),
    clusterPoolCidrs: z.array(cidr),
    clusterPoolMaskSize: z.number().int().min(1).max(128).optional(),
    poolCidrs: z.array(cidr),
    blockSize: z.number().int().min(1).max(128).optional(),
    strictAffinity: z.boolean(),
    /** Directories holding the delegated IPAM plugin (delegated mode). */
    cniPath: z.array(absPath),
    /** Pod interface MTU; absent: the underlay device's MTU, less the overlay's 50 bytes in tunnel mode. */
    mtu: z.number().int().min(576).max(65535).optional(),
    /**
     * `tunnel`: pods reach other nodes' pods through the VXLAN overlay (needs the eBPF datapath);
     * `native`: routed on the underlay via the nodes' IPs. Default: tunnel with the etcd kvstore
     * (a cluster), native with the embedded one (a single node); resolved by resolveConfigDefaults.
     */
    routingMode: z.enum(ROUTING_MODES),
    /** The overlay's encapsulation (tunnel mode). */
    tunnelProtocol: z.enum(TUNNEL_PROTOCOLS),
    /** UDP port of the overlay (tunnel mode); the same on every node. */
    tunnelPort: z.number().int().min(1).max(65535),
    /** This node's IP as other nodes reach it (the tunnel endpoint in the ipcache); default: the underlay device's IPv4 address. */
    nodeIp: z.string().refine((ip) => ipFamilyOf(ip) !== 0, { message: 'must be an IP address' }).optional(),
    /** TTL of the node's kvstore lease: a dead node's identities and ipcache entries go this long after it. */
    leaseTtlSeconds: z.number().int().min(2).max(3600),
    masqueradeCidrs: z.array(cidr).optional(),
    /** Pod traffic leaving the masquerade CIDRs is SNATed to the node's address (in BPF with the eBPF datapath, nftables with the routing one). */
    masquerade: z.boolean(),
    /**
     * The eBPF datapath masquerades pods' IPv6 traffic too (Cilium's --enable-ipv6-masquerade), to the device's IPv6 address.
     * Off unless asked: an IPv6 pod leaves with its own address today, and an upgrade must not change that under it.
     */
    ipv6Masquerade: z.boolean(),
    /** The node's devices that get the NodePort and masquerade programs (Cilium's --devices); default: detected. */
    devices: z.array(interfaceName).min(1).optional(),
    /** How a service's backend is chosen for a new connection: at random, or by Maglev consistent hashing. */
    lbAlgorithm: z.enum(LB_ALGORITHMS),
    /** ClusterIPs answer traffic from outside the cluster too (Cilium's --bpf-lb-external-clusterip); off: dropped as CLUSTERIP_FROM_OUTSIDE. */
    bpfLbExternalClusterip: z.boolean(),
    /** SNAT's source ports before the node's ephemeral range and the NodePort range are taken out (natPorts.ts says why). */
    bpfNatPortRange: z.string().refine((r) => isPortRange(r), { message: 'must be MIN-MAX with 1 ≤ MIN ≤ MAX ≤ 65535' }),
    /** Conntrack entries one endpoint may hold (0: no budget); beyond it its new flows are dropped as CT_ENDPOINT_BUDGET. */
    bpfCtEndpointMax: z.number().int().min(0).max(1 << 24),
    /** Entries of each service's Maglev table: a prime. */
    lbMaglevTableSize: z
      .number()
      .int()
      .refine(isValidMaglevTableSize, { message: `must be a prime ${MAGLEV_MIN_TABLE_SIZE}..${MAGLEV_MAX_TABLE_SIZE} (such as 16381 or 65521)` }),
    /** How long a provisional allocation from an ADD survives unconfirmed. */
    ipamExpirationMs: z.number().int().min(1000).max(3_600_000),
    bpffsRoot: absPath,
    /** `bpf`: the eBPF datapath (policy enforced on packets); `routing`: routes only, for nodes without BPF. */
    datapath: z.enum(DATAPATH_KINDS),
    /** Policy map entries one endpoint may hold (Cilium's --bpf-policy-map-max): a map state beyond it fails the endpoint's regeneration. */
    policyEndpointMaxEntries: z.number().int().min(1).max(1 << 22),
    /** eBPF map sizes by short name (lxc, ipcache, policy, ctTcp, ctAny, frag, events, lbServices, lbBackends, lbRevnat, lbAffinity, lbMaglev, lbMembers, snat); missing ones take the defaults. */
    bpfMapSizes: z.partialRecord(z.enum(BPF_MAP_SIZE_KEYS), z.number().int().min(1).max(0xffffffff)).optional(),
    /** eBPF trace events: off, new-flows (one per new connection) or all (every packet). */
    traceLevel: z.enum(TRACE_LEVELS),
    /** Flows the agent keeps in its history (GET /v1/flows, `tendril observe`), repeats folded; 0 keeps none. */
    flowHistorySize: z.number().int().min(0).max(1_000_000),
    /** Flow metrics (tendril_flows_processed_total, tendril_flow_drops_total, tendril_policy_verdicts_total) counted from every datapath event. */
    flowMetrics: z.boolean(),
    /** The workload labels flow metrics carry: none, the peers' namespaces, or namespaces and workloads. */
    flowMetricsLabels: z.enum(FLOW_METRICS_LABELS),
    /** Cilium's --policy-audit-mode: policy refusals are reported (verdict `audit`) and the flows pass; other drops stay. */
    policyAuditMode: z.boolean(),
    /** How the eBPF programs go on pods' devices: tcx links (kernel 6.6+; an RCU grace period per attach) or clsact filters (faster ADD). */
    bpfLxcAttach: z.enum(['tcx', 'clsact']),
    /** A kubeconfig to reach the Kubernetes API server with; given (or --k8s-api-server, or in-cluster), the agent follows the API server. */
    k8sKubeconfig: z.string().min(1).optional(),
    /** The API server's URL, over the kubeconfig's (or the in-cluster) one. */
    k8sApiServer: z
      .string()
      .refine((u) => URL.canParse(u) && /^https?:$/.test(new URL(u).protocol), { message: 'must be an http:// or https:// URL' })
      .optional(),
    /** How long start-up waits for the watchers' first sync (and for this node's Node object); past it the agent goes on unsynced. */
    k8sSyncTimeoutSeconds: z.number().int().min(1).max(3600),
    /** The namespace of tendril's own namespaced objects in the API server (each node's Lease in crd mode). */
    k8sNamespace: z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, 'must be a namespace name (a DNS label)'),
    /** Where the metrics are served over TCP (host:port, [v6]:port or :port); absent: only on the API socket. */
    prometheusServeAddr: z
      .string()
      .refine((a) => isServeAddress(a), { message: 'must be host:port, [ipv6]:port or :port, such as 127.0.0.1:9962' })
      .optional(),
    /** Where the flows are also served over TCP, read-only (GET /v1/flows, /v1/policy, /healthz) for a relay; absent: off. */
    flowsListenAddr: z
      .string()
      .refine((a) => isServeAddress(a), { message: 'must be host:port, [ipv6]:port or :port, such as 127.0.0.1:4245' })
      .optional(),
    /** The flows listener's TLS certificate and key (PEM files); with a client CA, clients need a certificate it signed. */
    flowsTlsCert: absPath.optional(),
    flowsTlsKey: absPath.optional(),
    flowsTlsClientCa: absPath.optional(),
    /** A file holding the bearer token every request to the flows listener must carry. */
    flowsTokenFile: absPath.optional(),
    logFile: absPath.optional(),
    logLevel: z.enum(LOG_LEVELS),
    /** json, text (a line a person reads) or auto: text on a terminal, JSON to a file or a pipe. */
    logFormat: z.enum(LOG_FORMATS),
  })
  .strict();
export type AgentConfig = z.infer<typeof AgentConfigSchema>;

/** The defaults; `routingMode` and `identityAllocationMode` are absent here since they follow the kvstore and Kubernetes (see resolveClusterDefaults). */
export function defaultConfig(): Omit<AgentConfig, 'routingMode' | 'identityAllocationMode'> {
  return {
    nodeName: hostname().split('.')[0] || 'node',
    stateDir: DEFAULT_STATE_DIR,
    libDir: DEFAULT_LIB_DIR,
    socket: join(DEFAULT_STATE_DIR, 'tendril.sock'),
    kvstore: 'embedded',
    kvstoreOpts: {},
    ipam: 'host-scope',
    podCidrs: [],
    clusterPoolCidrs: [],
    poolCidrs: [],
    strictAffinity: false,
    cniPath: ['/opt/cni/bin', '/usr/lib/cni'],
    tunnelProtocol: 'vxlan',
    tunnelPort: TUNNEL_DEFAULT_PORT,
    ipamExpirationMs: 60_000,
    leaseTtlSeconds: 15,
    bpffsRoot: '/sys/fs/bpf',
    datapath: 'bpf',
    traceLevel: 'new-flows',
    flowHistorySize: 16_384,
    flowMetrics: true,
    flowMetricsLabels: 'none',
    policyAuditMode: false,
    bpfLxcAttach: 'clsact',
    masquerade: true,
    ipv6Masquerade: false,
    lbAlgorithm: 'random',
    bpfLbExternalClusterip: false,
    bpfNatPortRange: `${DEFAULT_NAT_PORT_RANGE[0]}-${DEFAULT_NAT_PORT_RANGE[1]}`,
    bpfCtEndpointMax: 0,
    lbMaglevTableSize: MAGLEV_DEFAULT_TABLE_SIZE,
    policyEndpointMaxEntries: DEFAULT_MAX_ENTRIES_PER_ENDPOINT,
    k8sSyncTimeoutSeconds: DEFAULT_K8S_SYNC_TIMEOUT_SECONDS,
    k8sNamespace: 'kube-system',
    logLevel: 'info',
    logFormat: 'auto',
  };
}

/** Tunnel in a cluster (the etcd kvstore, or the API server holds the cluster's state), native on a single node. */
export function defaultRoutingMode(kvstore: AgentConfig['kvstore'], mode: AgentConfig['identityAllocationMode'] = 'kvstore'): AgentConfig['routingMode'] {
  return kvstore === 'etcd' || mode === 'crd' ? 'tunnel' : 'native';
}

/** `crd` when the agent follows an API server and no etcd is named (Cilium's default), else `kvstore`. */
export function defaultIdentityAllocationMode(kvstore: unknown, kubernetes: boolean): AgentConfig['identityAllocationMode'] {
  return kubernetes && kvstore !== 'etcd' ? 'crd' : 'kvstore';
}

/**
 * Fills what follows from other fields: the identity allocation mode
 * (Kubernetes on: a kubeconfig or API server given, or `kubernetes` told by
 * the caller who knows the environment, in-cluster), then the routing mode.
 */
function resolveClusterDefaults(raw: unknown, kubernetes: boolean | undefined): unknown {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return raw;
  const r = { ...(raw as Record<string, unknown>) };
  const k8s = kubernetes ?? (r.k8sKubeconfig !== undefined || r.k8sApiServer !== undefined);
  r.identityAllocationMode ??= defaultIdentityAllocationMode(r.kvstore, k8s);
  r.routingMode ??= defaultRoutingMode(r.kvstore === 'etcd' ? 'etcd' : 'embedded', r.identityAllocationMode === 'crd' ? 'crd' : 'kvstore');
  return r;
}

/** What may change while the agent runs (PATCH /config): the log level and the provisional allocations' expiry. */
export interface RuntimeConfigUpdate {
  logLevel?: AgentConfig['logLevel'];
  ipamExpirationMs?: AgentConfig['ipamExpirationMs'];
}

/**
 * Applies a runtime update in place: the subsystems that read these fields
 * (IPAM's expiry on each allocation) hold this very object.
 */
export function updateConfig(config: AgentConfig, update: RuntimeConfigUpdate): void {
  if (update.logLevel !== undefined) config.logLevel = update.logLevel;
  if (update.ipamExpirationMs !== undefined) config.ipamExpirationMs = update.ipamExpirationMs;
}

/**
 * Validates a merged configuration; the message names every bad field. A
 * missing routingMode takes the kvstore's default here, so the resolved
 * configuration (and GET /config) holds the mode in effect.
 */
export function validateConfig(raw: unknown, o: { kubernetes?: boolean } = {}): AgentConfig {
  const parsed = AgentConfigSchema.safeParse(resolveClusterDefaults(raw, o.kubernetes));
  if (!parsed.success) {
    throw new ConfigError(`invalid agent configuration: ${parsed.error.issues.map(describeIssue).join('; ')}`);
  }
  const c = parsed.data;
  const need = (cond: boolean, msg: string) => {
    if (!cond) throw new ConfigError(msg);
  };
  need(c.ipam !== 'host-scope' || c.podCidrs.length > 0, '--ipam host-scope needs --pod-cidr');
  need(c.ipam !== 'cluster-pool' || c.clusterPoolCidrs.length > 0 || c.identityAllocationMode === 'crd', '--ipam cluster-pool needs --cluster-pool-cidr');
  if (c.identityAllocationMode === 'crd') {
    need(c.kvstore !== 'etcd', '--identity-allocation-mode crd keeps the cluster\'s state in the Kubernetes API server: leave out --kvstore etcd, or use --identity-allocation-mode kvstore');
    need(c.ipam !== 'block', '--ipam block shares its block affinities through the kvstore: use --identity-allocation-mode kvstore with --kvstore etcd, or --ipam cluster-pool/kubernetes');
    need(
      c.ipam !== 'cluster-pool' || c.clusterPoolCidrs.length === 0,
      '--identity-allocation-mode crd: tendril-operator hands out the cluster-pool CIDRs (its --cluster-pool-cidr); leave out the agent\'s --cluster-pool-cidr',
    );
  }
  need(c.ipam !== 'block' || c.poolCidrs.length > 0, '--ipam block needs --pool-cidr');
  // Whether Kubernetes is on also depends on the environment (in-cluster): resolveConfig and the agent check that.
  need(c.ipam !== 'kubernetes' || c.podCidrs.length === 0, '--ipam kubernetes takes the pod CIDRs from this node\'s Node object (spec.podCIDRs): leave out --pod-cidr');
  need(
    c.routingMode !== 'tunnel' || c.datapath === 'bpf',
    '--routing-mode tunnel needs --datapath bpf (the overlay is the eBPF datapath\'s); use --routing-mode native with --datapath routing',
  );
  // IPv6 pod CIDRs are carried in both routing modes: natively routed, or in the overlay (over an IPv4 or an IPv6 underlay).
  validateAbsolutePath(c.socket, 'socket path');
  checkFlowsListener(c);
  return c;
}

/** The flows listener's options fit together, and an address other hosts reach is protected (listenAccess.ts). */
function checkFlowsListener(c: AgentConfig): void {
  const files = flowsListenFiles(c);
  if (c.flowsListenAddr === undefined) {
    const given = Object.entries(FLOWS_FLAGS_BY_FILE).filter(([k]) => files[k as keyof ListenAccessFiles] !== undefined).map(([, f]) => f);
    if (given.length > 0) throw new ConfigError(`${given.join(', ')} configure the flows listener: give --flows-listen-addr too`);
    return;
  }
  checkListenOptions(c.flowsListenAddr, files, FLOWS_LISTEN_FLAGS);
}

export const FLOWS_LISTEN_FLAGS = listenFlags('--flows-');
const FLOWS_FLAGS_BY_FILE: Record<keyof ListenAccessFiles, string> = {
  tokenFile: FLOWS_LISTEN_FLAGS.tokenFile,
  tlsCert: FLOWS_LISTEN_FLAGS.tlsCert,
  tlsKey: FLOWS_LISTEN_FLAGS.tlsKey,
  tlsClientCa: FLOWS_LISTEN_FLAGS.tlsClientCa,
};

/** The flows listener's access files as listenAccess.ts takes them. */
export function flowsListenFiles(c: AgentConfig): ListenAccessFiles {
  return {
    ...(c.flowsTokenFile !== undefined ? { tokenFile: c.flowsTokenFile } : {}),
    ...(c.flowsTlsCert !== undefined ? { tlsCert: c.flowsTlsCert } : {}),
    ...(c.flowsTlsKey !== undefined ? { tlsKey: c.flowsTlsKey } : {}),
    ...(c.flowsTlsClientCa !== undefined ? { tlsClientCa: c.flowsTlsClientCa } : {}),
  };
}

/**
 * The fields whose key a user writes (the long flag in camelCase, in the
 * config file, GET /config and `tendril config`) is not the field's own name.
 * One table, so an error, the printed configuration and the file agree: a
 * user who wrote `podCidr` was told about `podCidrs`.
 */
export const CONFIG_USER_KEYS = {
  kvstoreOpts: 'kvstoreOpt',
  podCidrs: 'podCidr',
  clusterPoolCidrs: 'clusterPoolCidr',
  poolCidrs: 'poolCidr',
  leaseTtlSeconds: 'leaseTtl',
  masqueradeCidrs: 'masqueradeCidr',
  ipamExpirationMs: 'ipamExpiration',
  policyEndpointMaxEntries: 'bpfPolicyEndpointMax',
  k8sSyncTimeoutSeconds: 'k8sSyncTimeout',
} as const satisfies Partial<Record<keyof AgentConfig, string>>;

/** Each eBPF map size's key (its flag, --bpf-lxc-max, in camelCase). */
export const BPF_MAP_SIZE_USER_KEYS = {
  lxc: 'bpfLxcMax',
  ipcache: 'bpfIpcacheMax',
  policy: 'bpfPolicyMax',
  ctTcp: 'bpfCtTcpMax',
  ctAny: 'bpfCtAnyMax',
  frag: 'bpfFragMax',
  events: 'bpfEventsMax',
  lbServices: 'bpfLbServiceMax',
  lbBackends: 'bpfLbBackendMax',
  lbRevnat: 'bpfLbRevnatMax',
  lbAffinity: 'bpfLbAffinityMax',
  lbMaglev: 'bpfLbMaglevMax',
  lbMembers: 'bpfLbMemberMax',
  snat: 'bpfNatMax',
} as const satisfies Record<BpfMapSizeKey, string>;

/** The key a user writes for a configuration field. */
export function userConfigKey(field: string): string {
  return (CONFIG_USER_KEYS as Record<string, string>)[field] ?? field;
}

/** A user key's flag: `podCidr` is `--pod-cidr`. */
function flagOf(userKey: string): string {
  return `--${userKey.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
}

/** One schema problem, named by the key the user wrote and its flag: `podCidr[0] (--pod-cidr): must be a CIDR…`. */
function describeIssue(issue: z.core.$ZodIssue): string {
  const [field, ...rest] = issue.path;
  if (field === undefined) return issue.message;
  let key = userConfigKey(String(field));
  if (field === 'bpfMapSizes' && rest.length > 0 && String(rest[0]) in BPF_MAP_SIZE_USER_KEYS) key = BPF_MAP_SIZE_USER_KEYS[String(rest.shift()) as BpfMapSizeKey];
  const where = key + rest.map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`)).join('');
  return `${where} (${flagOf(key)}): ${issue.message}`;
}

/**
 * The configuration under the keys a user writes: what GET /config answers
 * and `tendril config` prints, a valid config file as it stands (the map
 * sizes as their own keys).
 */
export function userConfigView(c: AgentConfig): Record<string, unknown> {
  const view: Record<string, unknown> = {};
  for (const [field, value] of Object.entries(c)) {
    if (value === undefined) continue;
    if (field === 'bpfMapSizes') {
      for (const [map, size] of Object.entries(value as Record<string, number>)) view[BPF_MAP_SIZE_USER_KEYS[map as BpfMapSizeKey]] = size;
    } else view[userConfigKey(field)] = value;
  }
  return view;
}

/** Reads the optional YAML config file; its keys are the config's field names. */
export async function readConfigFile(path: string): Promise<Record<string, unknown>> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read config file ${path}: ${fileErrorReason(err)}`, ConfigErrorCode.FILE_UNREADABLE, { cause: err });
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new ConfigError(`config file ${path} is not valid YAML: ${(err as Error).message}`, ConfigErrorCode.FILE_MALFORMED, { cause: err });
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new ConfigError(`config file ${path} must be a mapping`, ConfigErrorCode.FILE_MALFORMED);
  return doc as Record<string, unknown>;
}

/**
 * What the node's setup masquerades: the masquerade CIDRs, or none when
 * masquerading is off with the routing datapath (its nftables table). The
 * eBPF datapath takes the CIDRs either way (they are also what pod traffic
 * is not masqueraded to) and is told about masquerading separately.
 */
export function nodeMasqueradeCidrs(c: AgentConfig): string[] {
  if (!c.masquerade && c.datapath !== 'bpf') return [];
  const cidrs = masqueradeCidrs(c);
  // The eBPF datapath masquerades IPv6 only with --ipv6-masquerade: an IPv6 CIDR in
  // its trie is what turns it on, and one listed without it would tell `tendril status` what is not done.
  if (c.datapath !== 'bpf' || c.ipv6Masquerade) return cidrs;
  return cidrs.filter((text) => tryParseInterfaceAddress(text, { leadingZeros: true })?.address.family !== 6);
}

/** The CIDRs whose traffic leaving them is masqueraded: explicit, else the pod address space. */
export function masqueradeCidrs(c: AgentConfig): string[] {
  if (c.masqueradeCidrs) return c.masqueradeCidrs;
  switch (c.ipam) {
    case 'host-scope':
    case 'kubernetes':
      // kubernetes: the Node's pod CIDRs, which the agent puts in podCidrs before anything uses them.
      return c.podCidrs;
    case 'cluster-pool':
      // Without the pools (crd mode: tendril-operator has them), the CIDRs it handed this node.
      return c.clusterPoolCidrs.length > 0 ? c.clusterPoolCidrs : c.podCidrs;
    case 'block':
      return c.poolCidrs;
    case 'delegated':
      return [];
  }
}
