/**
 * tendril-agent's flags and how they and the optional YAML config file make
 * the agent's configuration (flags win; file keys are the long flags in
 * camelCase). Apart from main.ts so tests can parse flags without starting
 * an agent.
 */
import { join, resolve } from 'node:path';
import { Command, Option } from 'commander';
import { k8sConnection, k8sEnabled, requireKubernetesForIpam } from '../k8s/index.js';
import { parseKvstoreOpts } from '../kvstore/factory.js';
import { describeKvstoreOptions } from '../kvstore/optionKeys.js';
import { MAGLEV_DEFAULT_TABLE_SIZE, TUNNEL_DEFAULT_PORT, TUNNEL_OVERHEAD } from '../datapath/bpf/constants.js';
import {
  ConfigError,
  DATAPATH_KINDS,
  DEFAULT_K8S_SYNC_TIMEOUT_SECONDS,
  defaultConfig,
  IDENTITY_ALLOCATION_MODES,
  IPAM_MODES,
  LB_ALGORITHMS,
  LOG_LEVELS,
  readConfigFile,
  ROUTING_MODES,
  type AgentConfig,
  TRACE_LEVELS,
  TUNNEL_PROTOCOLS,
  validateConfig,
  BPF_MAP_SIZE_USER_KEYS,
  CONFIG_USER_KEYS,
  userConfigKey,
} from './config.js';
import { closestMatch } from './didYouMean.js';
import { tendrilVersion } from '../version.js';
import { cleanupCommand } from './cleanup/cleanupFlags.js';
import { LOG_FORMATS } from '../logging/logger.js';
import { FLOW_METRICS_LABELS } from '../metrics/index.js';

const list = (v: string, prev: string[] = []) => [...prev, ...v.split(',').filter((s) => s !== '')];
const repeat = (v: string, prev: string[] = []) => [...prev, v];
const int = (name: string) => (v: string) => {
  if (!/^\d+$/.test(v)) throw new ConfigError(`${name} must be a whole number, got "${v}"`);
  return Number(v);
};

export interface Flags {
  config?: string;
  nodeName?: string;
  stateDir?: string;
  libDir?: string;
  socket?: string;
  kvstore?: string;
  kvstoreOpt?: string[];
  identityAllocationMode?: string;
  ipam?: string;
  podCidr?: string[];
  clusterPoolCidr?: string[];
  clusterPoolMaskSize?: number;
  poolCidr?: string[];
  blockSize?: number;
  strictAffinity?: boolean;
  cniPath?: string[];
  mtu?: number;
  routingMode?: string;
  tunnelProtocol?: string;
  tunnelPort?: number;
  nodeIp?: string;
  leaseTtl?: number;
  masqueradeCidr?: string[];
  ipamExpiration?: number;
  bpffsRoot?: string;
  datapath?: string;
  traceLevel?: string;
  flowHistorySize?: number;
  flowMetrics?: boolean;
  flowMetricsLabels?: string;
  policyAuditMode?: boolean;
  bpfLxcAttach?: string;
  bpfPolicyEndpointMax?: number;
  bpfLxcMax?: number;
  bpfIpcacheMax?: number;
  bpfPolicyMax?: number;
  bpfCtTcpMax?: number;
  bpfCtAnyMax?: number;
  bpfFragMax?: number;
  bpfEventsMax?: number;
  bpfLbServiceMax?: number;
  bpfLbBackendMax?: number;
  bpfLbRevnatMax?: number;
  bpfLbAffinityMax?: number;
  bpfLbMaglevMax?: number;
  bpfLbMemberMax?: number;
  bpfNatMax?: number;
  lbAlgorithm?: string;
  lbMaglevTableSize?: number;
  bpfLbExternalClusterip?: boolean;
  bpfNatPortRange?: string;
  bpfCtEndpointMax?: number;
  devices?: string[];
  masquerade?: boolean;
  ipv6Masquerade?: boolean;
  k8sKubeconfig?: string;
  k8sApiServer?: string;
  k8sSyncTimeout?: number;
  k8sNamespace?: string;
  prometheusServeAddr?: string;
  flowsListenAddr?: string;
  flowsTlsCert?: string;
  flowsTlsKey?: string;
  flowsTlsClientCa?: string;
  flowsTokenFile?: string;
  logFile?: string;
  logLevel?: string;
  logFormat?: string;
}

export function agentCommand(): Command {
  return new Command('tendril-agent')
    .description('tendril node agent: IPAM, endpoints and the datapath, serving the API on a unix socket')
    .version(tendrilVersion())
    .option('--config <file>', 'YAML config file (keys as the long flags in camelCase)')
    .option('--node-name <name>', 'this node\'s name (default: hostname)')
    .option('--state-dir <dir>', 'runtime state: socket, endpoints, deletion queue (default /var/run/tendril)')
    .option('--lib-dir <dir>', 'durable data: the embedded kvstore (default /var/lib/tendril)')
    .option('--socket <path>', 'API socket (default <state-dir>/tendril.sock)')
    .addOption(new Option('--kvstore <kind>', 'kvstore backend').choices(['embedded', 'etcd']))
    .option(
      '--kvstore-opt <key=value>',
      `kvstore option, repeatable; ${describeKvstoreOptions()}`,
      repeat,
    )
    .addOption(new Option('--ipam <mode>', 'IPAM mode').choices([...IPAM_MODES]))
    .option('--pod-cidr <cidr[,cidr]>', 'host-scope: this node\'s pod CIDRs', list)
    .option('--cluster-pool-cidr <cidr[,cidr]>', 'cluster-pool: cluster CIDRs', list)
    .option('--cluster-pool-mask-size <n>', 'cluster-pool: per-node prefix length', int('--cluster-pool-mask-size'))
    .option('--pool-cidr <cidr[,cidr]>', 'block: IP pools', list)
    .option('--block-size <n>', 'block: block prefix length (default 26 / 122)', int('--block-size'))
    .option('--strict-affinity', 'block: never borrow from other hosts\' blocks')
    .option('--cni-path <dir[,dir]>', 'delegated: where the IPAM plugin lives', list)
    .option('--mtu <n>', `pod interface MTU (default: auto, the underlay device's MTU, less ${TUNNEL_OVERHEAD} in tunnel mode; a larger value is refused)`, int('--mtu'))
    .addOption(
      new Option('--routing-mode <mode>', 'how pods reach other nodes\' pods: tunnel (VXLAN overlay, needs --datapath bpf) or native (routes via the nodes\' IPs); default tunnel in a cluster (--kvstore etcd, or --identity-allocation-mode crd), else native').choices([
        ...ROUTING_MODES,
      ]),
    )
    .addOption(new Option('--tunnel-protocol <protocol>', 'tunnel mode: the overlay\'s encapsulation (default vxlan)').choices([...TUNNEL_PROTOCOLS]))
    .option('--tunnel-port <port>', `tunnel mode: the overlay's UDP port, the same on every node (default ${TUNNEL_DEFAULT_PORT})`, int('--tunnel-port'))
    .option('--node-ip <ip>', 'this node\'s IP as other nodes reach it: tunnel endpoint, native next hop (default: the underlay device\'s IPv4 address)')
    .option('--lease-ttl <s>', 'kvstore lease TTL: a dead node\'s entries go this long after it (default 15)', int('--lease-ttl'))
    .option('--masquerade-cidr <cidr[,cidr]>', 'masquerade traffic from these CIDRs leaving them (default: the pod CIDRs)', list)
    .option('--ipam-expiration <ms>', 'how long an unconfirmed ADD allocation lives (default 60000)', int('--ipam-expiration'))
    .option('--bpffs-root <dir>', 'bpffs mount for pinned datapath objects (default /sys/fs/bpf)')
    .addOption(new Option('--datapath <kind>', 'bpf: policy enforced by eBPF programs (default); routing: routes only, for nodes without BPF').choices([...DATAPATH_KINDS]))
    .addOption(new Option('--trace-level <level>', 'eBPF trace events: one per new flow (default), every packet, or none').choices([...TRACE_LEVELS]))
    .option('--flow-history-size <n>', 'flows kept in the agent\'s history for `tendril observe` (repeats folded; 0 keeps none; default 16384)', int('--flow-history-size'))
    .option('--flow-metrics', 'count every datapath event in the Prometheus flow metrics: flows by type and verdict, drops by reason, policy verdicts by rule (default)')
    .option('--no-flow-metrics', 'no flow metrics (with --flow-history-size 0 the agent then decodes no event nobody asked for)')
    .addOption(
      new Option('--flow-metrics-labels <labels>', 'workload labels on the flow metrics: none (default), the source and destination namespace, or namespace and workload (app label, else the pod name less its generated suffixes); never a pod or IP').choices([
        ...FLOW_METRICS_LABELS,
      ]),
    )
    .addOption(new Option('--bpf-lxc-attach <how>', 'how programs go on pod devices: clsact filters (default; ~2 ms per ADD) or pinned tcx links (each attach waits out an RCU grace period: ~27 ms per ADD)').choices(['tcx', 'clsact']))
    .option('--bpf-policy-endpoint-max <n>', 'policy map entries one endpoint may hold; more fails its regeneration (default 16384)', int('--bpf-policy-endpoint-max'))
    .option('--bpf-lxc-max <n>', 'eBPF endpoint map entries (default 65535)', int('--bpf-lxc-max'))
    .option('--bpf-ipcache-max <n>', 'eBPF ipcache entries (default 512000)', int('--bpf-ipcache-max'))
    .option('--bpf-policy-max <n>', 'eBPF policy entries, all endpoints together (default 4194304)', int('--bpf-policy-max'))
    .option('--bpf-ct-tcp-max <n>', 'eBPF TCP conntrack entries (default 524288)', int('--bpf-ct-tcp-max'))
    .option('--bpf-ct-any-max <n>', 'eBPF non-TCP conntrack entries (default 262144)', int('--bpf-ct-any-max'))
    .option('--bpf-frag-max <n>', 'eBPF fragment tracking entries (default 8192)', int('--bpf-frag-max'))
    .option('--bpf-events-max <bytes>', 'eBPF event ring buffer size in bytes, a power of two (default 4194304)', int('--bpf-events-max'))
    .option('--bpf-lb-service-max <n>', 'eBPF service map entries: one per frontend and scope, plus one per backend slot (default 65536)', int('--bpf-lb-service-max'))
    .option('--bpf-lb-backend-max <n>', 'eBPF service backend entries (default 65536)', int('--bpf-lb-backend-max'))
    .option('--bpf-lb-revnat-max <n>', 'eBPF reverse NAT entries, one per service (default 65536)', int('--bpf-lb-revnat-max'))
    .option('--bpf-lb-affinity-max <n>', 'eBPF session affinity entries, one per client and service (default 65536)', int('--bpf-lb-affinity-max'))
    .option('--bpf-lb-maglev-max <n>', 'eBPF Maglev tables, one per service (default 65536)', int('--bpf-lb-maglev-max'))
    .option('--bpf-lb-member-max <n>', 'eBPF service membership entries, one per backend of each service (default 65536)', int('--bpf-lb-member-max'))
    .option('--bpf-nat-max <n>', 'eBPF SNAT entries, two per masqueraded or NodePort-SNATed connection (default 524288)', int('--bpf-nat-max'))
    .addOption(new Option('--lb-algorithm <alg>', 'how a service backend is chosen for a new connection: random (default) or maglev (consistent hashing)').choices([...LB_ALGORITHMS]))
    .option('--lb-maglev-table-size <prime>', `entries of each service's Maglev table, a prime 251..131071 (default ${MAGLEV_DEFAULT_TABLE_SIZE})`, int('--lb-maglev-table-size'))
    .option('--policy-audit-mode', 'report policy refusals (monitor verdict audit) and let those flows pass; drops for other reasons stay (default: off)')
    .option('--bpf-lb-external-clusterip', 'ClusterIPs answer traffic from outside the cluster too (default: off, such traffic is dropped)')
    .option('--bpf-nat-port-range <min-max>', 'source ports SNAT gives out, less the node\'s ephemeral range and the NodePort range 30000-32767 (default 1024-65535)')
    .option('--bpf-ct-endpoint-max <n>', 'conntrack entries one endpoint may hold; its new flows beyond are dropped as CT_ENDPOINT_BUDGET (default 0: no budget)', int('--bpf-ct-endpoint-max'))
    .option('--devices <name[,name]>', 'node devices for NodePort from outside and masquerading (default: every up interface with a global address of either family)', list)
    .option('--masquerade', 'masquerade pod traffic leaving the masquerade CIDRs (default)')
    .option('--no-masquerade', 'do not masquerade pod traffic')
    .option('--ipv6-masquerade', 'eBPF datapath: masquerade pods\' IPv6 traffic too, to the device\'s IPv6 address (default off: IPv6 leaves with the pod\'s address; the routing datapath masquerades IPv6 with --masquerade)')
    .option('--k8s-kubeconfig <file>', 'follow this Kubernetes API server (pods, namespaces, nodes, NetworkPolicies, tendril policies, Services, EndpointSlices); default: in-cluster when run in a pod')
    .option('--k8s-api-server <url>', 'the Kubernetes API server\'s URL, over the kubeconfig\'s or the in-cluster one')
    .addOption(
      new Option(
        '--identity-allocation-mode <mode>',
        'where cluster-wide state lives: crd (the Kubernetes API server: TendrilIdentity, TendrilEndpoint, TendrilNode objects, Leases) or kvstore (etcd); default crd when following an API server without --kvstore etcd',
      ).choices([...IDENTITY_ALLOCATION_MODES]),
    )
    .option('--k8s-namespace <ns>', 'the namespace of tendril\'s own objects in the API server (each node\'s Lease; default kube-system)')
    .option('--k8s-sync-timeout <s>', `how long start-up waits for the first Kubernetes sync and this node's Node object (default ${DEFAULT_K8S_SYNC_TIMEOUT_SECONDS})`, int('--k8s-sync-timeout'))
    .option('--prometheus-serve-addr <host:port>', 'also serve GET /metrics (Prometheus) over TCP here, such as 127.0.0.1:9962 (default: off; the API socket always serves it)')
    .option('--flows-listen-addr <host:port>', 'also serve the flows (GET /v1/flows, GET /v1/policy, GET /healthz; read-only) over TCP here for `tendril relay` and `tendril observe --server`, announced in the node registry (default: off); an address other hosts reach needs --flows-tls-cert or --flows-token-file')
    .option('--flows-tls-cert <file>', 'flows listener: serve TLS with this certificate (PEM)')
    .option('--flows-tls-key <file>', 'flows listener: the certificate\'s private key (PEM)')
    .option('--flows-tls-client-ca <file>', 'flows listener: ask clients for a certificate signed by this CA (mTLS)')
    .option('--flows-token-file <file>', 'flows listener: every request must carry this file\'s token (Authorization: Bearer)')
    .option('--log-file <path>', 'log to this file instead of stderr')
    .addOption(new Option('--log-level <level>', 'log level').choices([...LOG_LEVELS]))
    .addOption(new Option('--log-format <format>', 'json, text, or auto (default): text when logging to a terminal, JSON to a file or a pipe').choices([...LOG_FORMATS]))
    // main.ts runs `cleanup` itself; listed here for --help. The no-op action keeps a flags-only command line the agent's (not a help page).
    .addCommand(cleanupCommand())
    .action(() => undefined)
    .exitOverride();
}

export async function resolveConfig(flags: Flags): Promise<AgentConfig> {
  const fromFile = flags.config ? await readConfigFile(flags.config) : {};
  const config = configFromFile(fromFile, flags.config ?? '', flags);
  requireKubernetesForIpam(config);
  return config;
}

/**
 * A config file's keys (the flags', each parsed as the flag's own) over the
 * defaults, and `flags` over them; validated.
 */
export function configFromFile(file: Record<string, unknown>, path: string, flags: Flags = {}): AgentConfig {
  const merged: Record<string, unknown> = { ...defaultConfig() };
  applyFlags(merged, flagsFromConfigFile(agentCommand(), file, path));
  applyFlags(merged, flags);
  // In a pod with a service account Kubernetes is on without a flag: the identity allocation mode's default follows.
  return validateConfig(merged, { kubernetes: k8sEnabled(k8sConnection(merged as { k8sKubeconfig?: string; k8sApiServer?: string })) });
}

/** Puts what flags (or a config file's flag-named keys) say over a configuration under construction. */
function applyFlags(merged: Record<string, unknown>, flags: Flags): void {
  const set = (key: string, v: unknown) => {
    if (v !== undefined) merged[key] = v;
  };
  set('nodeName', flags.nodeName);
  set('stateDir', flags.stateDir);
  set('libDir', flags.libDir);
  set('socket', flags.socket ?? (flags.stateDir ? join(flags.stateDir, 'tendril.sock') : undefined));
  set('kvstore', flags.kvstore);
  if (flags.kvstoreOpt) merged.kvstoreOpts = parseKvstoreOpts(flags.kvstoreOpt);
  set('ipam', flags.ipam);
  set('podCidrs', flags.podCidr);
  set('clusterPoolCidrs', flags.clusterPoolCidr);
  set('clusterPoolMaskSize', flags.clusterPoolMaskSize);
  set('poolCidrs', flags.poolCidr);
  set('blockSize', flags.blockSize);
  set('strictAffinity', flags.strictAffinity);
  set('cniPath', flags.cniPath);
  set('mtu', flags.mtu);
  set('routingMode', flags.routingMode);
  set('tunnelProtocol', flags.tunnelProtocol);
  set('tunnelPort', flags.tunnelPort);
  set('nodeIp', flags.nodeIp);
  set('leaseTtlSeconds', flags.leaseTtl);
  set('masqueradeCidrs', flags.masqueradeCidr);
  set('ipamExpirationMs', flags.ipamExpiration);
  set('bpffsRoot', flags.bpffsRoot);
  set('datapath', flags.datapath);
  set('traceLevel', flags.traceLevel);
  set('flowHistorySize', flags.flowHistorySize);
  set('flowMetrics', flags.flowMetrics);
  set('flowMetricsLabels', flags.flowMetricsLabels);
  set('policyAuditMode', flags.policyAuditMode);
  set('bpfLxcAttach', flags.bpfLxcAttach);
  set('policyEndpointMaxEntries', flags.bpfPolicyEndpointMax);
  set('lbAlgorithm', flags.lbAlgorithm);
  set('lbMaglevTableSize', flags.lbMaglevTableSize);
  set('bpfLbExternalClusterip', flags.bpfLbExternalClusterip);
  set('bpfNatPortRange', flags.bpfNatPortRange);
  set('bpfCtEndpointMax', flags.bpfCtEndpointMax);
  set('devices', flags.devices);
  set('masquerade', flags.masquerade);
  set('ipv6Masquerade', flags.ipv6Masquerade);
  const sizes: Record<string, number | undefined> = {
    lxc: flags.bpfLxcMax,
    ipcache: flags.bpfIpcacheMax,
    policy: flags.bpfPolicyMax,
    ctTcp: flags.bpfCtTcpMax,
    ctAny: flags.bpfCtAnyMax,
    frag: flags.bpfFragMax,
    events: flags.bpfEventsMax,
    lbServices: flags.bpfLbServiceMax,
    lbBackends: flags.bpfLbBackendMax,
    lbRevnat: flags.bpfLbRevnatMax,
    lbAffinity: flags.bpfLbAffinityMax,
    lbMaglev: flags.bpfLbMaglevMax,
    lbMembers: flags.bpfLbMemberMax,
    snat: flags.bpfNatMax,
  };
  const sizeFlags = Object.fromEntries(Object.entries(sizes).filter(([, v]) => v !== undefined));
  if (Object.keys(sizeFlags).length > 0) merged.bpfMapSizes = { ...(merged.bpfMapSizes as Record<string, number> | undefined), ...sizeFlags };
  // Absolute, so GET /config says which file the agent read.
  set('k8sKubeconfig', flags.k8sKubeconfig === undefined ? undefined : resolve(flags.k8sKubeconfig));
  set('k8sApiServer', flags.k8sApiServer);
  set('k8sSyncTimeoutSeconds', flags.k8sSyncTimeout);
  set('k8sNamespace', flags.k8sNamespace);
  set('identityAllocationMode', flags.identityAllocationMode);
  set('prometheusServeAddr', flags.prometheusServeAddr);
  set('flowsListenAddr', flags.flowsListenAddr);
  // Absolute, so GET /config says which files the agent read.
  set('flowsTlsCert', flags.flowsTlsCert === undefined ? undefined : resolve(flags.flowsTlsCert));
  set('flowsTlsKey', flags.flowsTlsKey === undefined ? undefined : resolve(flags.flowsTlsKey));
  set('flowsTlsClientCa', flags.flowsTlsClientCa === undefined ? undefined : resolve(flags.flowsTlsClientCa));
  set('flowsTokenFile', flags.flowsTokenFile === undefined ? undefined : resolve(flags.flowsTokenFile));
  set('logFile', flags.logFile);
  set('logLevel', flags.logLevel);
  set('logFormat', flags.logFormat);
}

/** Options that are no configuration: the file itself, and --version. */
const NOT_CONFIG_KEYS = new Set(['config', 'version']);

/** The config file keys that are flags: each long flag in camelCase (`--pod-cidr` is `podCidr`), with its option. */
export function configFileFlagKeys(cmd: Command): Map<string, Option> {
  const keys = new Map<string, Option>();
  for (const o of cmd.options) {
    const key = o.attributeName();
    // --masquerade and --no-masquerade share the key: a boolean either way.
    if (!NOT_CONFIG_KEYS.has(key) && !keys.has(key)) keys.set(key, o);
  }
  return keys;
}

/**
 * Older keys the documentation used (deploy/kubernetes's ConfigMap writes
 * `kvstoreOpts`): still read, as the key they became.
 */
const DOCUMENTED_OLD_KEYS: Record<string, string> = { kvstoreOpts: 'kvstoreOpt' };

/**
 * A config file's keys as flags, each value parsed exactly as the flag's
 * would be (a YAML list or a comma-separated string for a list flag, a
 * mapping for --kvstore-opt). Keys are the long flags in camelCase and
 * nothing else, so a file, an error and `tendril config` name a setting
 * alike; an unknown key is refused with the key to use.
 */
export function flagsFromConfigFile(cmd: Command, file: Record<string, unknown>, path: string): Flags {
  const flagKeys = configFileFlagKeys(cmd);
  const flags: Record<string, unknown> = {};
  const writtenAs = new Map<string, string>();
  for (const [written, value] of Object.entries(file)) {
    const key = DOCUMENTED_OLD_KEYS[written] ?? written;
    const option = flagKeys.get(key);
    if (option) {
      const first = writtenAs.get(key);
      if (first !== undefined) throw new ConfigError(`config file ${path}: "${first}" and "${written}" are the same setting: give one`);
      writtenAs.set(key, written);
      flags[key] = flagValueFromFile(option, written, value, path);
      continue;
    }
    if (written === 'bpfMapSizes') {
      throw new ConfigError(`config file ${path}: unknown key "bpfMapSizes": each map's size is a key of its own (${Object.values(BPF_MAP_SIZE_USER_KEYS).join(', ')})`);
    }
    const hint = written in CONFIG_USER_KEYS ? userConfigKey(written) : closestMatch(written, [...flagKeys.keys()]);
    throw new ConfigError(`config file ${path}: unknown key "${written}"${hint ? ` (did you mean "${hint}"?)` : ''}; keys are the long flags in camelCase`);
  }
  return flags as Flags;
}

function flagValueFromFile(option: Option, key: string, value: unknown, path: string): unknown {
  const bad = (what: string) => new ConfigError(`config file ${path}: ${key} must be ${what}`);
  const takesValue = option.required || option.optional;
  if (!takesValue) {
    if (typeof value !== 'boolean') throw bad('true or false');
    return value;
  }
  const accumulates = option.parseArg === list || option.parseArg === repeat;
  let items: unknown[];
  if (Array.isArray(value)) {
    if (!accumulates) throw bad('a single value, not a list');
    items = value;
  } else if (option.attributeName() === 'kvstoreOpt' && value !== null && typeof value === 'object') {
    items = Object.entries(value).map(([k, v]) => `${k}=${String(v)}`);
  } else items = [value];
  let parsed: unknown = undefined;
  for (const item of items) {
    if (typeof item !== 'string' && typeof item !== 'number') throw bad(accumulates ? 'a list of strings' : 'a string or a number');
    const text = String(item);
    if (option.argChoices && !option.argChoices.includes(text)) throw bad(`one of ${option.argChoices.join(', ')}, not "${text}"`);
    try {
      parsed = option.parseArg ? option.parseArg(text, parsed) : text;
    } catch (err) {
      throw new ConfigError(`config file ${path}: ${key}: ${(err as Error).message}`, undefined, { cause: err });
    }
  }
  return parsed;
}
