/**
 * What the API serves, each part a narrow interface over the agent's
 * subsystems (the server in src/api/server depends only on these).
 */
import { tendrilVersion } from '../version.js';
import { deletionQueueDepth, deletionQueueSockets } from '../api/deletionQueueDrain.js';
import { AgentError } from '../api/errors.js';
import type { AgentConfigView, ConfigPatch, DatapathStatus, Health } from '../api/types.js';
import type { AgentApi, EndpointApi, HealthApi, IdentityApi, IpamApi, PolicyApi } from '../api/server/server.js';
import { k8sNotSyncedMessage } from '../api/server/server.js';
import type { NodeApi } from '../api/server/nodeRoutes.js';
import type { Datapath } from '../datapath/types.js';
import { PRIVATE_BPFFS_FIX } from '../datapath/kernel/bpf/index.js';
import type { Endpoint, EndpointManager, EndpointStore, PolicyRevisions } from '../endpoint/index.js';
import { type IdentityAllocator, identityToJSON, reservedIdentity } from '../identity/index.js';
import { type IpamProvider, ipamOwner, ownerLease } from '../ipam/index.js';
import type { IPCache } from '../ipcache/index.js';
import type { AgentKubernetes } from '../k8s/kubernetes.js';
import { userServiceApi } from '../k8s/index.js';
import type { Backend } from '../kvstore/types.js';
import type { Logger } from '../logging/logger.js';
import { type AgentMetrics, type AgentMetricsSources, pinnedDatapathSource } from '../metrics/index.js';
import type { OwnNode } from '../node/index.js';
import { parsePolicyText, refuseNamedPorts, UnknownEndpointError, withStaged } from '../policy/index.js';
import type { PolicyStore } from '../policy/store/index.js';
import type { PolicyLedger } from '../policy/store/policyLedger.js';
import type { ServiceManager } from '../service/index.js';
import type { AgentDatapath } from './agentDatapath.js';
import type { BpfObservability } from './bpfObservability.js';
import type { CniService } from './cniService.js';
import { type AgentConfig, nodeMasqueradeCidrs, updateConfig, userConfigView } from './config.js';

/** The agent's subsystems as the API reads them. */
export interface AgentParts {
  config: AgentConfig;
  log: Logger;
  startedAt: number;
  backend: Backend;
  ipam: IpamProvider;
  datapath: Datapath;
  identities: IdentityAllocator;
  ipcache: IPCache;
  metrics: AgentMetrics;
  policy: PolicyRevisions;
  policyStore: PolicyStore<ReturnType<PolicyRevisions['upsertPolicies']>, ReturnType<PolicyRevisions['deletePolicies']>>;
  policyLedger: PolicyLedger;
  endpoints: EndpointManager;
  endpointStore: EndpointStore;
  services: ServiceManager;
  cni: CniService;
  /** The CNI service as the API and the deletion queue call it: counted and timed in the metrics. */
  cniHandler: Pick<CniService, 'handle'>;
  ownNode: OwnNode;
  kubernetes: AgentKubernetes | undefined;
  observability: BpfObservability | undefined;
  ownedDatapath: AgentDatapath | undefined;
}

export function agentApi(p: AgentParts): AgentApi {
  const registry = p.ownNode.registry;
  return {
    endpoints: endpointApi(p),
    ipam: ipamApi(p),
    policy: policyApi(p),
    identities: identityApi(p),
    ipcache: { list: () => p.ipcache.list() },
    health: healthApi(p),
    cni: p.cniHandler,
    log: p.log,
    metrics: p.metrics,
    kvstore: { get: (key) => p.backend.get(key), list: (prefix) => p.backend.list(prefix) },
    // Without load-balancing maps the routes answer SERVICE_UNSUPPORTED themselves;
    // with Kubernetes on, the IDs of its Services are not the API's to write.
    ...(p.datapath.loadBalancer ? { services: p.kubernetes ? userServiceApi(p.services) : p.services } : {}),
    ...(p.observability ? { monitor: p.observability.monitor, bpf: p.observability.bpf } : {}),
    ...(p.observability?.flows ? { flows: p.observability.flows } : {}),
    ...(registry ? { nodes: { nodeName: p.config.nodeName, registry, routesInstalled: (name) => p.ownNode.routesInstalled(name) } satisfies NodeApi } : {}),
  };
}

/** The endpoint's lease; its confirm answers false unless IPAM holds the endpoint's very addresses for it. */
export function endpointLease(ipam: IpamProvider, ep: Endpoint) {
  return ownerLease(ipam.all(), ipamOwner(ep.containerId, ep.ifName), ep.addresses);
}

function endpointApi(p: AgentParts): EndpointApi {
  const { endpoints } = p;
  return {
    list: () => endpoints.statuses(),
    lookup: (ref) => {
      const ep = endpoints.lookup(ref);
      return ep && endpoints.status(ep);
    },
    adopt: (req) => p.cni.adoptEndpoint(req),
    delete: async (id) => {
      const ep = endpoints.get(id);
      if (!ep) throw new AgentError('NOT_FOUND', `endpoint ${id} not found`);
      await endpoints.delete(id, { lease: endpointLease(p.ipam, ep) });
    },
    updateLabels: (id, labels) => endpoints.updateLabels(id, labels),
  };
}

function ipamApi(p: AgentParts): IpamApi {
  const { ipam, endpoints } = p;
  return {
    mode: ipam.mode,
    list: () => ipam.list(),
    stats: () => ipam.stats(),
    allocate: (req) => ipam.allocateDirect(req),
    release: async (ip) => {
      if (!(await ipam.releaseUnused(ip, { endpointAt: (at) => endpoints.byIp(at), inFlightOwners: () => p.cni.inFlightOwners() }))) {
        throw new AgentError('NOT_FOUND', `address ${ip} is not allocated`);
      }
    },
  };
}

function policyApi(p: AgentParts): PolicyApi {
  const { policy, policyStore, policyLedger } = p;
  return {
    get revision() {
      return policy.revision;
    },
    get clusterRevision() {
      return policyStore.clusterRevision;
    },
    list: (filter) => policy.policies(filter),
    lost: () => policyLedger.lost().map((l) => l.name),
    confirmLoss: async () => {
      const r = await policyLedger.confirmLoss(policyStore, policy);
      return { revision: policy.revision, dropped: r.dropped, endpoints: r.endpoints };
    },
    import: async (text, opts) => {
      // Parsed here first so a named port is refused before anything is stored or applied.
      const parsed = parsePolicyText(text);
      refuseNamedPorts(parsed);
      // Staged through the annotation: the stored document says so on every node and after a restart.
      return policyStore.importPolicies(opts?.staged === true ? parsed.map((x) => withStaged(x, true)) : parsed);
    },
    promote: (filters) => policyStore.promotePolicies(filters),
    delete: (filter) => policyStore.deletePolicies(filter),
    selectors: () => policy.engine.selectors(),
    selectsNoEndpoint: (names) => policy.engine.selectsNoEndpoint(names),
    trace: (src, dst, proto, port) => policy.engine.trace(src, dst, proto, port),
    endpointPolicy: (id) => policy.engine.endpointPolicy(id),
    datapathEnforced: p.datapath.enforcesPolicy === true,
  };
}

function identityApi(p: AgentParts): IdentityApi {
  const { identities } = p;
  return {
    // The allocator's list already holds the reserved identities: adding them here listed 0–10 twice.
    list: () => identities.list().map((i) => ({ ...identityToJSON(i), references: identities.references(i.id) })),
    get: (id) => {
      const identity = reservedIdentity(id) ?? identities.lookupById(id);
      return identity && { ...identityToJSON(identity), references: identities.references(id) };
    },
  };
}

function healthApi(p: AgentParts): HealthApi {
  return {
    health: () => health(p),
    config: () => publicConfig(p.config),
    patchConfig: (patch) => patchConfig(p, patch),
  };
}

export async function health(p: AgentParts): Promise<Health> {
  const kv = await p.backend.status();
  const services = p.services.list();
  const datapath = await datapathStatus(p);
  const quarantined = (await p.endpointStore.quarantineHolds()).records;
  const lostPolicies = p.policyLedger.lost().length;
  const k8s = p.kubernetes?.status();
  const registry = p.ownNode.registry;
  return {
    // Lost policies degrade the node: they are enforced from the state dir only, and a cluster's other nodes no longer have them.
    status: kv.connected && (k8s === undefined || (k8s.synced && k8s.connected)) && lostPolicies === 0 ? 'ok' : 'degraded',
    nodeName: p.config.nodeName,
    version: tendrilVersion(),
    uptimeSeconds: Math.round((Date.now() - p.startedAt) / 1000),
    kvstore: { backend: kv.backend, connected: kv.connected, revision: kv.revision, detail: kv.detail },
    endpoints: p.endpoints.size,
    routingMode: p.config.routingMode,
    ...(registry ? { nodes: registry.list().length } : {}),
    ...(quarantined > 0 ? { quarantinedEndpoints: quarantined } : {}),
    ...(lostPolicies > 0 ? { lostPolicies } : {}),
    ipam: { mode: p.ipam.mode, allocated: (await p.ipam.list()).length },
    ...(k8s ? { kubernetes: k8s } : {}),
    datapath,
    services: { count: services.length, backends: services.reduce((n, svc) => n + svc['backend-addresses'].length, 0) },
    policies: policiesStatus(p),
    masquerade: masqueradeStatus(p, datapath),
  };
}

function policiesStatus(p: AgentParts): Health['policies'] {
  const all = p.policy.policies();
  const staged = all.filter((x) => x.staged === true).length;
  return {
    count: all.length,
    endpointsEnforced: p.endpoints.list().filter((ep) => policyEnforced(p.policy, ep.id)).length,
    ...(staged > 0 ? { staged } : {}),
    ...(p.config.policyAuditMode ? { auditMode: true } : {}),
  };
}

/** GET /healthz on the metrics address: as on the socket, not ready until Kubernetes' first sync. */
export async function readiness(p: AgentParts): Promise<{ status: string } | { notReady: string }> {
  const h = await health(p);
  return h.kubernetes && !h.kubernetes.synced ? { notReady: k8sNotSyncedMessage(h.kubernetes) } : { status: h.status };
}

/** Whether a policy puts either direction of the endpoint in default-deny (false for one the engine does not know yet). */
function policyEnforced(policy: PolicyRevisions, id: number): boolean {
  try {
    const e = policy.engine.endpointPolicy(id).enforcement;
    return e.ingress.enforced || e.egress.enforced;
  } catch (err) {
    if (err instanceof UnknownEndpointError) return false;
    throw err;
  }
}

/** What the kernel has: programs attached, the bpffs, the fullest maps, recent drops (eBPF datapath only). */
async function datapathStatus(p: AgentParts): Promise<DatapathStatus> {
  const observability = p.observability;
  if (!observability) return { kind: p.config.datapath };
  const bpffs = p.ownedDatapath?.bpffs;
  const usage = await pinnedDatapathSource(observability.bpf.inspector).mapUsage();
  const fullest = usage.filter((u) => u.maxEntries > 0).sort((a, b) => b.entries / b.maxEntries - a.entries / a.maxEntries || a.map.localeCompare(b.map)).slice(0, 3);
  return {
    kind: 'bpf',
    ...(bpffs ? { bpffs: { ...bpffs, ...(bpffs.sharing === 'private' ? { fix: PRIVATE_BPFFS_FIX } : {}) } } : {}),
    ...(p.datapath.attachmentStatus ? { programs: await p.datapath.attachmentStatus() } : {}),
    maps: fullest,
    drops: await observability.drops.recent(),
  };
}

/** On or off, and where: the eBPF masquerade runs on the node devices the datapath attached to. */
function masqueradeStatus(p: AgentParts, datapath: DatapathStatus): NonNullable<Health['masquerade']> {
  const { config } = p;
  const bpf = datapath.kind === 'bpf';
  const devices = (datapath.programs?.devices ?? []).filter((d) => d.role === 'node').map((d) => d.name);
  return {
    enabled: config.masquerade,
    ...(config.masquerade ? { by: bpf ? ('bpf' as const) : ('nftables' as const) } : {}),
    cidrs: config.masquerade ? nodeMasqueradeCidrs(config) : [],
    devices: config.masquerade && bpf ? devices : [],
    natPortRanges: config.masquerade ? (p.ownedDatapath?.natPortRanges ?? []) : [],
  };
}

function publicConfig(config: AgentConfig): AgentConfigView {
  const { kvstoreOpts } = config;
  // Credentials passed as kvstore options are not for API readers.
  const redacted = Object.fromEntries(Object.entries(kvstoreOpts).map(([k, v]) => [k, /pass|key|token/i.test(k) ? '***' : v]));
  return userConfigView({ ...config, kvstoreOpts: redacted }) as AgentConfigView;
}

function patchConfig(p: AgentParts, patch: ConfigPatch): AgentConfigView {
  if (patch.logLevel !== undefined) p.log.level = patch.logLevel;
  updateConfig(p.config, { ...(patch.logLevel !== undefined ? { logLevel: patch.logLevel } : {}), ...(patch.ipamExpiration !== undefined ? { ipamExpirationMs: patch.ipamExpiration } : {}) });
  p.log.info({ patch }, 'configuration changed');
  return publicConfig(p.config);
}

/** What the metrics read at each scrape, from the subsystems that own it. */
export function metricsSources(p: AgentParts): AgentMetricsSources {
  const { observability } = p;
  return {
    endpointStates: () => p.endpoints.list().map((ep) => ep.state),
    identities: () => {
      const all = p.identities.list();
      const reserved = all.filter((i) => reservedIdentity(i.id) !== undefined).length;
      return { reserved, allocated: all.length - reserved };
    },
    ipamAllocations: () => p.ipam.list(),
    ipamPodCidrs: () => p.ipam.podCidrs(),
    policyRevision: () => p.policy.revision,
    policiesLost: () => p.policyLedger.lost().length,
    deletionQueueDepth: () => deletionQueueDepth(deletionQueueSockets(p.config.socket, p.config.stateDir)),
    ipcacheMapWrites: () => p.datapath.ipcacheWriteStats?.(),
    ...(observability ? { datapath: pinnedDatapathSource(observability.bpf.inspector) } : {}),
  };
}
