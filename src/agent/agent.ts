import { Serializer } from '../async/keyedSerializer.js';
import { mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { tendrilVersion } from '../version.js';
import type { FastifyInstance } from 'fastify';
import { DeletionQueue, isRefused } from '../api/deletionQueue.js';
import { AgentError } from '../api/errors.js';
import type { AgentConfigView, CniRequest, ConfigPatch, DatapathStatus, Health } from '../api/types.js';
import type { Datapath } from '../datapath/types.js';
import { type Endpoint, EndpointManager, EndpointStore, PolicyRevisions } from '../endpoint/index.js';
import { IdentityAllocator, identityToJSON, LOCAL_IDENTITY_SCOPE, NodeLease, reservedIdentity } from '../identity/index.js';
import { parseIp, prefixContainsIp, tryParsePrefix } from '../netip/index.js';
import { IPCache, IpcacheCidrIdentities, KvstoreIPCacheSync, NodeAddressEntries } from '../ipcache/index.js';
import { LabelFilter } from '../labels/index.js';
import { parsePolicyText, PolicyEngine, refuseNamedPorts, UnknownEndpointError } from '../policy/index.js';
import { PRIVATE_BPFFS_FIX } from '../datapath/kernel/bpf/index.js';
import { PolicyStore } from '../policy/store/index.js';
import { PolicyLedger } from '../policy/store/policyLedger.js';
import { openBackend } from '../kvstore/factory.js';
import { defaultEmbeddedPath } from '../kvstore/embedded/embeddedOptions.js';
import { writeRunRecord } from './runRecord.js';
import type { Backend } from '../kvstore/types.js';
import type { Logger } from '../logging/logger.js';
import type { NodeApi } from './api/nodeRoutes.js';
import { type AgentApi, buildServer, checkSocketPath, type EndpointApi, type HealthApi, type IdentityApi, type IpamApi, k8sNotSyncedMessage, listenOnSocket, type PolicyApi } from './api/server.js';
import { attachmentOfOwner, CniService, ipamOwner, ownerLease } from './cniService.js';
import { type AgentDatapath, openAgentDatapath } from './agentDatapath.js';
import { InterfaceNames, netlinkLinks } from '../monitor/index.js';
import { BpfObservability, bpfPinDirOf } from './bpfObservability.js';
import { type AgentConfig, k8sConnection, nodeMasqueradeCidrs, userConfigView } from './config.js';
import { k8sEnabled, type RetryOptions, userServiceApi } from '../k8s/index.js';
import { AgentKubernetes, configWithNode, registryAddresses, requireKubernetesForIpam } from './kubernetes.js';
import { ServiceManager, ServiceStore } from '../service/index.js';
import { readInterfaceAddresses } from './interfaceAddresses.js';
import { IpamProvider } from './ipamProvider.js';
import { type NodeClaim, type NodeLock, NetnsNodeLock } from './nodeLock.js';
import { detectUnderlay, loopbackUp, type Underlay } from '../datapath/linux/underlay.js';
import { type NodeAddress, NodeConfigError, type NodeRecord, NodeRegistry, RemoteNodes, resolvePodMtu } from '../node/index.js';
import { AgentMetrics, type AgentMetricsSources, countedBackend, countedCni, MetricsServer, pinnedDatapathSource } from '../metrics/index.js';

/**
 * Test hook: TENDRIL_FAULT_POINT=<step> makes the agent kill itself with
 * SIGKILL when an ADD reaches that step, so crash-consistency tests can stop
 * it at an exact point. Unset in production.
 */
function faultPointFromEnv(env: NodeJS.ProcessEnv): ((step: string) => void) | undefined {
  const at = env.TENDRIL_FAULT_POINT;
  if (!at) return undefined;
  return (step) => {
    if (step === at) process.kill(process.pid, 'SIGKILL');
  };
}

export interface AgentDeps {
  /** Another datapath than the Linux one (tests run the agent over the fake). */
  datapath?: Datapath;
  /** What makes this agent its node's only one (default: the abstract socket @tendril-agent of its network namespace). */
  nodeLock?: NodeLock;
  /** The node's interface addresses (ipcache identity `host`); default: netlink in the agent's namespace, none over a datapath handed in. */
  interfaceAddresses?: () => Promise<string[]>;
  /**
   * The underlay device (node IP and MTU); default: detected over netlink, none over a datapath
   * handed in (the test process's own devices are not the fake node's).
   */
  underlay?: Underlay;
  /** Kubernetes knobs for tests: the environment that says in-cluster (default process.env), how long an ADD waits for its pod, the watchers' back-off. */
  kubernetes?: { env?: NodeJS.ProcessEnv; podWaitMs?: number; retry?: RetryOptions };
}

/** What the agent settled on for its node before anything is touched: its IP and the pods' MTU. */
interface NodeBasics {
  /** The node IP given or found on the underlay; undefined: the router address stands in once IPAM has one. */
  ip: string | undefined;
  podMtu: number;
  /** What the MTU and the IP were taken from (logged once the agent is ready). */
  underlay: Underlay | undefined;
}

/**
 * The underlay, the node IP and the pod MTU, before anything is touched: an
 * MTU the underlay cannot carry is a start-up error with one clear message,
 * never silent fragmentation later.
 */
async function nodeBasics(config: AgentConfig, deps: AgentDeps): Promise<NodeBasics> {
  if (deps.underlay === undefined && !deps.datapath && !(await loopbackUp())) {
    throw new NodeConfigError('the loopback interface lo is down in the network namespace the agent runs in (a namespace just created has it down, and with it no routing table): bring it up with `ip link set lo up` there and start the agent again');
  }
  const underlay = deps.underlay ?? (deps.datapath ? undefined : await detectUnderlay({ ...(config.nodeIp !== undefined ? { nodeIp: config.nodeIp } : {}), ...(config.devices ? { devices: config.devices } : {}) }));
  let podMtu: number;
  try {
    podMtu = resolvePodMtu({ mode: config.routingMode, ...(underlay ? { underlayMtu: underlay.mtu } : {}), ...(config.mtu !== undefined ? { configured: config.mtu } : {}) });
  } catch (err) {
    if (!(err instanceof NodeConfigError)) throw err;
    const where = underlay ? ` (underlay ${underlay.device}, MTU ${underlay.mtu})` : '';
    throw new NodeConfigError(`${err.message}${where}; lower --mtu or leave it out to use the largest that fits`, { cause: err });
  }
  return { ip: config.nodeIp ?? underlay?.ip, podMtu, underlay };
}

/**
 * The node agent: wires the kvstore, IPAM, identities, ipcache, policy, the
 * endpoint manager and the datapath together, and serves the API through the
 * narrow interfaces of `api()`. Stopping it leaves every pod's network in place.
 */
export class Agent {
  private server: FastifyInstance | undefined;
  private nodeClaim: NodeClaim | undefined;
  private readonly startedAt = Date.now();
  private readonly routerAddresses = new Map<string, { family: 4 | 6; ip: string }>();
  private readonly policy: PolicyRevisions;
  /** Imported policies in the kvstore: restored before endpoints, shared by the cluster's nodes. */
  private readonly policyStore: PolicyStore<ReturnType<PolicyRevisions['upsertPolicies']>, ReturnType<PolicyRevisions['deletePolicies']>>;
  /** What this node enforced, in its state dir: a kvstore that lost policies is noticed, the revision never goes back. */
  private readonly policyLedger: PolicyLedger;
  /** The node's own addresses in the ipcache as identity `host`. */
  private readonly nodeAddresses: NodeAddressEntries;
  private readonly endpoints: EndpointManager;
  private readonly cni: CniService;
  /** The CNI service as the API and the deletion queue call it: counted and timed in the metrics. */
  private readonly cniHandler: Pick<CniService, 'handle'>;
  /** GET /metrics over TCP (--prometheus-serve-addr); absent when off. */
  private metricsServer: MetricsServer | undefined;
  private readonly endpointStore: EndpointStore;
  /** The datapath this agent opened (not one a test handed in): its handles are let go at stop. */
  private ownedDatapath: AgentDatapath | undefined;
  /** Monitor, /v1/bpf/* and conntrack GC: only with the eBPF datapath. */
  private observability: BpfObservability | undefined;
  /** Services: restored before endpoints, their Local entries following the endpoints. */
  private readonly services: ServiceManager;
  private readonly unsubscribeEndpoints: () => void;
  /** This node and the others in the kvstore: started after the ipcache sync, before endpoints are restored. */
  private nodeRegistry: NodeRegistry | undefined;
  /** The other nodes' ipcache entries and routes, from the registry. */
  private remoteNodes: RemoteNodes | undefined;
  private unsubscribePodCidrs: (() => void) | undefined;
  /** The own record's writes, in order (publishOwnNode). */
  private readonly publishing = new Serializer();
  /** The Kubernetes watchers; absent when Kubernetes is off. */
  private kubernetes: AgentKubernetes | undefined;
  private stopping: Promise<void> | undefined;

  private constructor(
    private readonly config: AgentConfig,
    private readonly log: Logger,
    private readonly backend: Backend,
    private readonly ipam: IpamProvider,
    private readonly datapath: Datapath,
    private readonly lease: NodeLease,
    private readonly identities: IdentityAllocator,
    private readonly ipcacheSync: KvstoreIPCacheSync,
    private readonly ipcache: IPCache,
    /** The node IP: given, the underlay's, or the router address. */
    private readonly nodeIp: string,
    /** The agent's own registry: kvstore operations are counted from the start, state is read at scrape. */
    private readonly metrics: AgentMetrics,
    podMtu: number,
    kubernetes?: AgentKubernetes,
  ) {
    this.kubernetes = kubernetes;
    const faultPoint = faultPointFromEnv(process.env);
    this.endpointStore = new EndpointStore(join(config.stateDir, 'endpoints'));
    // CIDR identities of policies come with their ipcache entries, so the datapath classifies those ranges.
    this.policy = new PolicyRevisions(new PolicyEngine({ identities, cidrIdentities: new IpcacheCidrIdentities(identities, ipcache), maxEntriesPerEndpoint: config.policyEndpointMaxEntries }), log.child({ subsys: 'policy' }));
    this.policyStore = new PolicyStore({ backend, target: this.policy, logger: log.child({ subsys: 'policy-store' }) });
    this.policyLedger = new PolicyLedger(config.stateDir, log.child({ subsys: 'policy-store' }));
    this.nodeAddresses = new NodeAddressEntries(ipcache, config.nodeName);
    this.endpoints = new EndpointManager({
      datapath,
      store: this.endpointStore,
      identities,
      ipcache,
      policy: this.policy,
      labelFilter: LabelFilter.DEFAULT,
      log: log.child({ subsys: 'endpoint' }),
      ...(faultPoint ? { faultPoint } : {}),
      onRegenerated: (result, seconds) => metrics.observeRegeneration(result, seconds),
    });
    this.services = new ServiceManager({
      loadBalancer: datapath.loadBalancer,
      store: new ServiceStore(join(config.stateDir, 'services')),
      log: log.child({ subsys: 'service' }),
      algorithm: config.lbAlgorithm,
      maglevTableSize: config.lbMaglevTableSize,
      localAddresses: () => this.endpoints.list().flatMap((ep) => ep.addresses.filter((a) => a.family === 4).map((a) => a.ip)),
      nodeAddresses: () => this.nodeAddresses.addresses.map((p) => p.slice(0, p.indexOf('/'))),
      routerAddresses: () => this.routerAddresses.keys(),
      podCidrs: () => this.ipam.podCidrs(),
      addressOwner: (ip) => this.clusterAddressOwner(ip),
    });
    // An endpoint that comes or goes changes which backends are local (externalTrafficPolicy Local).
    this.unsubscribeEndpoints = this.endpoints.subscribe((change) => {
      if (change.from !== undefined && change.to !== 'disconnected') return;
      this.services.localityChanged().catch((err: unknown) => log.error({ err }, 'updating services after an endpoint change failed'));
    });
    this.cni = new CniService({
      config,
      ipam,
      endpoints: this.endpoints,
      log,
      podMtu,
      ready: async () => (await this.backend.status()).connected,
      ...(faultPoint ? { faultPoint } : {}),
      ensureRouterAddress: (family, ip) => this.ensureRouterAddress(family, ip),
      ...(kubernetes ? { kubernetes } : {}),
    });
    this.cniHandler = countedCni(this.cni, metrics);
  }

  /**
   * Ownership comes before anything is touched (directories, kvstore, links,
   * addresses, the masquerade table): the node's lock, then the socket path
   * (another agent serving it, or something that is no socket). A second
   * agent fails here with an OwnershipError and has changed nothing.
   */
  static async start(config: AgentConfig, log: Logger, deps: AgentDeps = {}): Promise<Agent> {
    const claim = await (deps.nodeLock ?? new NetnsNodeLock()).claim();
    try {
      await checkSocketPath(config.socket);
      const agent = await Agent.startOwned(config, log, deps);
      agent.nodeClaim = claim;
      return agent;
    } catch (err) {
      await claim.release();
      throw err;
    }
  }

  /**
   * With Kubernetes on, the watchers come first: this node's Node object
   * (its pod CIDRs with --ipam kubernetes, its InternalIP as the node IP
   * when --node-ip is not given) is read before anything else is set up.
   */
  private static async startOwned(given: AgentConfig, log: Logger, deps: AgentDeps): Promise<Agent> {
    let kubernetes: AgentKubernetes | undefined;
    if (k8sEnabled(k8sConnection(given), deps.kubernetes?.env)) {
      kubernetes = new AgentKubernetes({
        config: given,
        log,
        // Services and EndpointSlices only where the datapath load-balances.
        services: deps.datapath ? deps.datapath.loadBalancer !== undefined : given.datapath === 'bpf',
        ...(deps.kubernetes?.podWaitMs !== undefined ? { podWaitMs: deps.kubernetes.podWaitMs } : {}),
        ...(deps.kubernetes?.retry ? { retry: deps.kubernetes.retry } : {}),
      });
    } else {
      requireKubernetesForIpam(given, deps.kubernetes?.env);
    }
    try {
      const config = configWithNode(given, await kubernetes?.loadOwnNode());
      return await Agent.startWith(config, log, deps, kubernetes);
    } catch (err) {
      await kubernetes?.stop();
      throw err;
    }
  }

  private static async startWith(config: AgentConfig, log: Logger, deps: AgentDeps, kubernetes: AgentKubernetes | undefined): Promise<Agent> {
    let opened: AgentDatapath | undefined;
    const basics = await nodeBasics(config, deps);
    await mkdir(config.stateDir, { recursive: true, mode: 0o700 });
    await mkdir(dirname(config.socket), { recursive: true, mode: 0o700 });
    // Before anything is pinned or stored: cleanup must find this agent from its state dir from now on.
    await writeRunRecord(config.stateDir, {
      pid: process.pid,
      socket: config.socket,
      libDir: config.libDir,
      bpffsRoot: config.bpffsRoot,
      ...(config.kvstore === 'embedded' ? { kvstorePath: config.kvstoreOpts['embedded.path'] ?? defaultEmbeddedPath(config.libDir) } : {}),
    });
    const metrics = new AgentMetrics();
    const backend = countedBackend(await openBackend({ kind: config.kvstore, options: config.kvstoreOpts, dataDir: config.libDir, logger: log.child({ subsys: 'kvstore' }) }), metrics);
    const lease = new NodeLease(backend, { ttlSeconds: config.leaseTtlSeconds, logger: log.child({ subsys: 'lease' }) });
    let created: Agent | undefined;
    try {
      const ipam = new IpamProvider(config, backend, log.child({ subsys: 'ipam' }));
      await ipam.start();
      const identities = new IdentityAllocator({ backend, nodeName: config.nodeName, lease, logger: log.child({ subsys: 'identity' }) });
      await identities.start();
      const ipcache = new IPCache({ logger: log.child({ subsys: 'ipcache' }) });
      const nodeIP = basics.ip ?? ipam.routerAddresses().find((r) => r.family === 4)?.ip ?? ipam.routerAddresses()[0]?.ip ?? '0.0.0.0';
      const ipcacheSync = new KvstoreIPCacheSync({ backend, ipcache, nodeName: config.nodeName, nodeIP, lease, logger: log.child({ subsys: 'ipcache' }) });
      await ipcacheSync.start();
      // The eBPF datapath loads its objects (maps reused from the pins) before any endpoint is restored.
      opened = deps.datapath ? undefined : await openAgentDatapath(config, ipcache, log, { podMtu: basics.podMtu, nodeIp: nodeIP });
      const agent = new Agent(config, log, backend, ipam, deps.datapath ?? opened!.datapath, lease, identities, ipcacheSync, ipcache, nodeIP, metrics, basics.podMtu, kubernetes);
      agent.ownedDatapath = opened;
      created = agent;
      for (const r of ipam.routerAddresses()) agent.routerAddresses.set(r.ip, r);
      await agent.datapath.setupNode({ routerAddresses: [...agent.routerAddresses.values()], masqueradeCidrs: nodeMasqueradeCidrs(config) });
      agent.observability = agent.bpfObservability();
      metrics.bind(agent.metricsSources());
      await agent.refreshNodeAddresses(deps.interfaceAddresses ?? (deps.datapath ? async () => [] : readInterfaceAddresses));
      await agent.startNodes();
      // Policies before endpoints: a restored endpoint's first regeneration already holds them, so
      // the pinned maps that enforced while the agent was down are never rewritten without them.
      // The ledger is read before the store's first listing can change it, compared after.
      const recordedPolicies = await agent.policyLedger.load();
      await agent.policyStore.start();
      await agent.policyLedger.start(recordedPolicies, agent.policyStore, agent.policy, agent.policy);
      // Services before endpoints: backends keep their IDs (conntrack pins connections to them), and
      // entries of services deleted while the agent was down go before any endpoint is synced.
      await agent.services.restore();
      // Kubernetes after the stored policies and services, before endpoints: the policies and services
      // the API server holds are in force when restored endpoints regenerate.
      await agent.startKubernetes();
      await agent.endpoints.restore({
        lease: (ep) => agent.leaseOf(ep),
        // IPAM may have lost the addresses (a kvstore that lost its latest writes): held for their endpoints again.
        reclaim: (ep) => (ep.ipamOwned ? ipam.reclaim(ipamOwner(ep.containerId, ep.ifName), ep.addresses) : Promise.resolve({ addresses: ep.addresses, reclaimed: [] })),
        // A restored endpoint's routes take its gateway as source address: the host device must hold it first.
        prepare: async (ep) => {
          for (const a of ep.addresses) await agent.ensureRouterAddress(a.family, a.gateway);
        },
        // The orphan sweep tells an interrupted ADD (a provisional address) from a committed endpoint's pod.
        addressOwners: async () => (ipam.mode === 'delegated' ? undefined : (await ipam.list()).map((a) => ({ ...attachmentOfOwner(a.owner), provisional: a.expiresAt !== undefined }))),
      });
      // Labels changed while the agent was down (pods relabelled, namespaces too) reach the restored endpoints.
      await agent.kubernetes?.reconcileEndpoints();
      // Pinned datapath state of endpoints that did not come back goes now (the restored ones are synced).
      await agent.datapath.restoreDone?.(agent.endpoints.list().map((ep) => ({ id: ep.id, hostIfName: ep.hostIfName })));
      // Which backends are local is known now: Local services take it from the endpoints from here on.
      await agent.services.endpointsRestored();
      // Drained before serving, so a client that sees the API up sees the queue done;
      // and once more after, for a DEL a plugin queued while the socket was not up yet.
      await agent.drainDeletionQueue();
      // Before the socket: an address that cannot be bound fails the start before clients see the API up.
      if (config.prometheusServeAddr !== undefined) agent.metricsServer = await MetricsServer.start(config.prometheusServeAddr, metrics, log.child({ subsys: 'metrics' }), () => agent.readiness());
      agent.server = buildServer(agent.api());
      await listenOnSocket(agent.server, config.socket);
      await agent.observability?.start();
      await agent.drainDeletionQueue();
      const { underlay } = basics;
      log.info(
        {
          socket: config.socket,
          ...(agent.metricsServer ? { prometheus: `${agent.metricsServer.address.host}:${agent.metricsServer.address.port}` } : {}),
          ipam: config.ipam,
          routers: ipam.routerAddresses(),
          endpoints: agent.endpoints.size,
          nodeIp: nodeIP,
          routingMode: config.routingMode,
          podMtu: basics.podMtu,
          underlay: underlay && { device: underlay.device, mtu: underlay.mtu },
          ...(agent.kubernetes ? { kubernetes: { apiServer: agent.kubernetes.status().apiServer, synced: agent.kubernetes.status().synced } } : {}),
        },
        'agent ready',
      );
      return agent;
    } catch (err) {
      // Stopped first, so they change nothing while the subsystems go (the caller's stop then has nothing left to do).
      await kubernetes?.stop();
      await created?.metricsServer?.close();
      created?.unsubscribeEndpoints();
      await created?.stopNodes();
      await created?.services.stop();
      await created?.policyStore.stop();
      await created?.policyLedger.stop();
      await opened?.close();
      await lease.stop();
      await backend.close();
      throw err;
    }
  }

  /**
   * Hands the watchers the subsystems they change and waits for their first
   * sync (bounded: past the timeout the agent goes on, /healthz failing until
   * they are synced). A watcher's relabel replaces an endpoint's k8s labels
   * and keeps the others (container labels from the runtime).
   */
  private async startKubernetes(): Promise<void> {
    const k8s = this.kubernetes;
    if (!k8s) return;
    k8s.bind({
      endpoints: this.endpoints,
      policy: this.policy,
      ...(this.datapath.loadBalancer ? { services: this.services } : {}),
    });
    await k8s.start();
    k8s.followOwnNode(() => this.publishOwnNode('Node addresses changed'));
  }

  /** What the API serves, each part a narrow interface over the subsystems. */
  api(): AgentApi {
    return {
      endpoints: this.endpointApi(),
      ipam: this.ipamApi(),
      policy: this.policyApi(),
      identities: this.identityApi(),
      ipcache: { list: () => this.ipcache.list() },
      health: this.healthApi(),
      cni: this.cniHandler,
      log: this.log,
      metrics: this.metrics,
      kvstore: { get: (key) => this.backend.get(key), list: (prefix) => this.backend.list(prefix) },
      // Without load-balancing maps the routes answer SERVICE_UNSUPPORTED themselves;
      // with Kubernetes on, the IDs of its Services are not the API's to write.
      ...(this.datapath.loadBalancer ? { services: this.kubernetes ? userServiceApi(this.services) : this.services } : {}),
      ...(this.observability ? { monitor: this.observability.monitor, bpf: this.observability.bpf } : {}),
      ...(this.nodeRegistry ? { nodes: this.nodeApi(this.nodeRegistry) } : {}),
    };
  }

  private nodeApi(registry: NodeRegistry): NodeApi {
    return {
      nodeName: this.config.nodeName,
      registry,
      routesInstalled: (name) => this.remoteNodes?.installed(name) === true,
    };
  }

  /**
   * Publishes this node in the registry (under its lease) and follows the
   * others: their addresses into the ipcache (identity remote-node, tunnel
   * endpoint their node IP), their pod CIDRs routed. Before endpoints are
   * restored, so a restored pod reaches the other nodes' pods at once.
   */
  private async startNodes(): Promise<void> {
    const registry = new NodeRegistry({ backend: this.backend, lease: this.lease, nodeName: this.config.nodeName, logger: this.log.child({ subsys: 'nodes' }) });
    this.nodeRegistry = registry;
    await registry.start(await this.ownNodeRecord());
    this.remoteNodes = new RemoteNodes({
      registry,
      nodeName: this.config.nodeName,
      ipcache: this.ipcache,
      ...(this.datapath.nodeRouting ? { routing: this.datapath.nodeRouting } : {}),
      logger: this.log.child({ subsys: 'nodes' }),
    });
    await this.remoteNodes.start();
    this.unsubscribePodCidrs = this.ipam.onPodCidrsChanged(() => this.publishOwnNode('pod CIDRs changed'));
  }

  private async stopNodes(): Promise<void> {
    this.unsubscribePodCidrs?.();
    this.unsubscribePodCidrs = undefined;
    await this.remoteNodes?.stop();
    await this.publishing.settled();
    // The record stays: the lease keeps it while a restarted agent takes over, its expiry removes it.
    await this.nodeRegistry?.stop();
  }

  /** This node as the registry publishes it. */
  private async ownNodeRecord(): Promise<NodeRecord> {
    const kv = await this.backend.status();
    const addresses: NodeAddress[] = [
      // 0.0.0.0 stands for "no address yet" (delegated IPAM before its first ADD): nothing to publish.
      ...(this.nodeIp !== '0.0.0.0' ? [{ type: 'InternalIP' as const, ip: this.nodeIp }] : []),
      // The Node's other addresses (Kubernetes on): after the node IP, which stays the tunnel endpoint.
      ...registryAddresses(this.kubernetes?.ownNode, this.nodeIp),
      ...[...this.routerAddresses.values()].map((r) => ({ type: 'RouterIP' as const, ip: r.ip })),
    ];
    return {
      name: this.config.nodeName,
      addresses,
      podCidrs: this.ipam.podCidrs(),
      routingMode: this.config.routingMode,
      ...(this.config.routingMode === 'tunnel' ? { tunnel: { protocol: this.config.tunnelProtocol, port: this.config.tunnelPort } } : {}),
      health: kv.connected ? { status: 'ok' } : { status: 'degraded', reason: `kvstore ${kv.backend} disconnected${kv.detail ? `: ${kv.detail}` : ''}` },
      startedAt: new Date(this.startedAt).toISOString(),
    };
  }

  /**
   * Writes the own record again (pod CIDRs, router addresses); a failure is
   * logged, the next change or lease renewal writes it. One write at a time,
   * each reading the state when it runs: two block claims close together
   * never leave the older CIDR list as the last word.
   */
  private publishOwnNode(why: string): void {
    const registry = this.nodeRegistry;
    if (!registry) return;
    void this.publishing
      .run(async () => registry.update(await this.ownNodeRecord()))
      .catch((err: unknown) => this.log.error({ err, why }, 'publishing this node\'s record failed'));
  }

  /** What the metrics read at each scrape, from the subsystems that own it. */
  private metricsSources(): AgentMetricsSources {
    const observability = this.observability;
    return {
      endpointStates: () => this.endpoints.list().map((ep) => ep.state),
      identities: () => {
        const all = this.identities.list();
        const reserved = all.filter((i) => reservedIdentity(i.id) !== undefined).length;
        return { reserved, allocated: all.length - reserved };
      },
      ipamAllocations: () => this.ipam.list(),
      ipamPodCidrs: () => this.ipam.podCidrs(),
      policyRevision: () => this.policy.revision,
      policiesLost: () => this.policyLedger.lost().length,
      deletionQueueDepth: () => this.deletionQueueDepth(),
      ipcacheMapWrites: () => this.datapath.ipcacheWriteStats?.(),
      ...(observability ? { datapath: pinnedDatapathSource(observability.bpf.inspector) } : {}),
    };
  }

  /** Entries waiting in the deletion queues the agent drains (trusted or not: both wait). */
  private async deletionQueueDepth(): Promise<number> {
    let depth = 0;
    for (const socket of new Set([this.config.socket, join(this.config.stateDir, 'tendril.sock')])) {
      const opened = await DeletionQueue.open(socket);
      if (opened.kind !== 'open') continue;
      try {
        depth += (await opened.queue.list()).length;
      } finally {
        await opened.queue.close();
      }
    }
    return depth;
  }

  /** The eBPF datapath's monitor, map inspection and conntrack GC, when the datapath pinned its maps. */
  private bpfObservability(): BpfObservability | undefined {
    // What the datapath says, not the config: a datapath handed in (the fake in tests) pinned nothing.
    const pinDir = bpfPinDirOf(this.datapath);
    if (pinDir === undefined) return undefined;
    const interfaces = new InterfaceNames(netlinkLinks, (err) => this.log.warn({ err }, 'listing interfaces for monitor events failed'));
    void interfaces.refresh();
    return new BpfObservability({
      pinDir,
      log: this.log,
      interfaces,
      identityLabels: (id) => {
        const identity = reservedIdentity(id) ?? this.identities.lookupById(id);
        return identity && identityToJSON(identity).labels;
      },
      policies: () => this.policy.policies(),
      policyRevision: () => this.policy.revision,
      enforcedBy: (endpointId, direction) => this.policy.engine.endpointEnforcement(endpointId)?.[direction].by,
    });
  }

  /** The endpoint's lease; its confirm answers false unless IPAM holds the endpoint's very addresses for it. */
  private leaseOf(ep: Endpoint) {
    return ownerLease(this.ipam.all(), ipamOwner(ep.containerId, ep.ifName), ep.addresses);
  }

  private endpointApi(): EndpointApi {
    const { endpoints } = this;
    return {
      list: () => endpoints.statuses(),
      lookup: (ref) => {
        const ep = endpoints.lookup(ref);
        return ep && endpoints.status(ep);
      },
      adopt: (req) => this.cni.adoptEndpoint(req),
      delete: async (id) => {
        const ep = endpoints.get(id);
        if (!ep) throw new AgentError('NOT_FOUND', `endpoint ${id} not found`);
        await endpoints.delete(id, { lease: this.leaseOf(ep) });
      },
      updateLabels: (id, labels) => endpoints.updateLabels(id, labels),
    };
  }

  private ipamApi(): IpamApi {
    const { ipam, endpoints } = this;
    return {
      mode: ipam.mode,
      list: () => ipam.list(),
      stats: () => ipam.stats(),
      allocate: (req) => ipam.allocateDirect(req),
      release: async (ip) => {
        // Freeing a live endpoint's address would hand it to the next pod while this one still uses it.
        const holder = endpoints.byIp(ip);
        if (holder) throw new AgentError('CONFLICT', `address ${ip} belongs to endpoint ${holder.id} (container ${holder.containerId}); delete the endpoint to free it`);
        const inFlight = this.cni.inFlightOwners();
        if (inFlight.size > 0) {
          const owner = (await ipam.list()).find((a) => a.ip === ip)?.owner;
          if (owner !== undefined && inFlight.has(owner)) throw new AgentError('CONFLICT', `address ${ip} belongs to ${owner}, whose CNI call is in progress`);
        }
        if (!(await ipam.releaseIp(ip))) throw new AgentError('NOT_FOUND', `address ${ip} is not allocated`);
      },
    };
  }

  private policyApi(): PolicyApi {
    const { policy, policyStore } = this;
    return {
      get revision() {
        return policy.revision;
      },
      get clusterRevision() {
        return policyStore.clusterRevision;
      },
      list: (filter) => policy.policies(filter),
      lost: () => this.policyLedger.lost().map((l) => l.name),
      confirmLoss: async () => {
        const r = await this.policyLedger.confirmLoss(policyStore, policy);
        return { revision: policy.revision, dropped: r.dropped, endpoints: r.endpoints };
      },
      import: async (text) => {
        // Parsed here first so a named port is refused before anything is stored or applied.
        const policies = parsePolicyText(text);
        refuseNamedPorts(policies);
        return this.policyStore.importPolicies(policies);
      },
      delete: (filter) => this.policyStore.deletePolicies(filter),
      selectors: () => policy.engine.selectors(),
      selectsNoEndpoint: (names) => policy.engine.selectsNoEndpoint(names),
      trace: (src, dst, proto, port) => policy.engine.trace(src, dst, proto, port),
      endpointPolicy: (id) => policy.engine.endpointPolicy(id),
      datapathEnforced: this.datapath.enforcesPolicy === true,
    };
  }

  private identityApi(): IdentityApi {
    const { identities } = this;
    return {
      // The allocator's list already holds the reserved identities: adding them here listed 0–10 twice.
      list: () => identities.list().map((i) => ({ ...identityToJSON(i), references: identities.references(i.id) })),
      get: (id) => {
        const identity = reservedIdentity(id) ?? identities.lookupById(id);
        return identity && { ...identityToJSON(identity), references: identities.references(id) };
      },
    };
  }

  private healthApi(): HealthApi {
    return {
      health: () => this.health(),
      config: () => this.publicConfig(),
      patchConfig: (patch) => this.patchConfig(patch),
    };
  }

  /** Router addresses, the node IP and the interfaces' addresses → ipcache identity `host` (at start). */
  private async refreshNodeAddresses(interfaceAddresses: () => Promise<string[]>): Promise<void> {
    const own = [...this.routerAddresses.keys(), ...(this.nodeIp !== '0.0.0.0' ? [this.nodeIp] : [])];
    this.nodeAddresses.set([...own, ...(await interfaceAddresses())]);
  }

  /**
   * What the cluster has at `ip` beyond this node's own pods and CIDRs (which
   * the service manager checks itself): an exact ipcache entry with an
   * identity that is not world or a CIDR's (a pod or node elsewhere), or
   * another node's pod CIDR. A service frontend there would capture this
   * node's connections to that pod.
   */
  private clusterAddressOwner(ip: string): string | undefined {
    const entry = this.ipcache.get(`${ip}/32`);
    // Reserved identities (world, host, remote-node, …) are left out: an external IP may be a node's.
    if (entry && reservedIdentity(entry.identity) === undefined && (entry.identity & LOCAL_IDENTITY_SCOPE) === 0) {
      return `is a pod's address (ipcache identity ${entry.identity}, from ${entry.owner})`;
    }
    const addr = parseIp(ip);
    for (const node of this.nodeRegistry?.list() ?? []) {
      if (node.name === this.config.nodeName) continue;
      const cidr = node.podCidrs.find((c) => {
        const p = tryParsePrefix(c);
        return p !== undefined && prefixContainsIp(p, addr);
      });
      if (cidr) return `is in node ${node.name}'s pod CIDR ${cidr} (pods' addresses)`;
    }
    return undefined;
  }

  private async ensureRouterAddress(family: 4 | 6, ip: string): Promise<void> {
    if (this.routerAddresses.has(ip)) return;
    this.routerAddresses.set(ip, { family, ip });
    this.nodeAddresses.add([ip]);
    await this.datapath.setupNode({ routerAddresses: [...this.routerAddresses.values()], masqueradeCidrs: nodeMasqueradeCidrs(this.config) });
    this.publishOwnNode('router address added');
  }

  /**
   * DELs the plugin queued while the agent was unreachable. They run as root,
   * so only a queue and entries root alone could have written are trusted
   * (see deletionQueue.ts); anything else is logged and left in place for an
   * operator to look at, since something wrote where it should not be able to.
   */
  private async drainDeletionQueue(): Promise<void> {
    const sockets = new Set([this.config.socket, join(this.config.stateDir, 'tendril.sock')]);
    for (const socket of sockets) {
      const opened = await DeletionQueue.open(socket);
      if (opened.kind === 'absent') continue;
      if (opened.kind === 'refused') {
        this.log.error({ dir: opened.dir, reason: opened.reason }, 'deletion queue not trusted, nothing in it is run: it must be a directory owned by root with mode 0700');
        continue;
      }
      try {
        await this.drainQueue(opened.queue);
      } finally {
        await opened.queue.close();
      }
    }
  }

  private async drainQueue(queue: DeletionQueue): Promise<void> {
    for (const q of await queue.list()) {
      if (isRefused(q)) {
        this.log.error({ file: q.file, reason: q.refused }, 'queued deletion not trusted, left in place: entries must be regular files owned by root, not writable by others');
        continue;
      }
      if (q.request === undefined) {
        this.log.error({ file: q.file }, 'unreadable queued deletion; dropping it');
        await queue.remove(q.name);
        continue;
      }
      const req = q.request as CniRequest;
      // A stuck agent may have done this DEL itself once it ran again (DEL is idempotent); if the
      // runtime has since added the attachment again, this older request must not remove it.
      const current = typeof req.containerId === 'string' && typeof req.ifName === 'string' ? this.endpoints.byContainer(req.containerId, req.ifName) : undefined;
      if (current && Date.parse(current.createdAt) > q.queuedAtMs) {
        this.log.warn({ file: q.file, endpoint: current.id, createdAt: current.createdAt }, 'queued deletion is older than the endpoint it names; dropping it');
        await queue.remove(q.name);
        continue;
      }
      try {
        await this.cniHandler.handle({ ...req, command: 'DEL' });
        this.log.info({ file: q.file }, 'queued deletion done');
        await queue.remove(q.name);
      } catch (err) {
        const e = err instanceof AgentError ? err : undefined;
        if (e && e.httpStatus < 500) {
          this.log.error({ file: q.file, err }, 'queued deletion is invalid; dropping it');
          await queue.remove(q.name);
        } else {
          this.log.error({ file: q.file, err }, 'queued deletion failed; kept for the next start');
        }
      }
    }
  }

  private async health(): Promise<Health> {
    const kv = await this.backend.status();
    const services = this.services.list();
    const datapath = await this.datapathStatus();
    const quarantined = (await this.endpointStore.quarantineHolds()).records;
    const lostPolicies = this.policyLedger.lost().length;
    const k8s = this.kubernetes?.status();
    return {
      // Lost policies degrade the node: they are enforced from the state dir only, and a cluster's other nodes no longer have them.
      status: kv.connected && (k8s === undefined || (k8s.synced && k8s.connected)) && lostPolicies === 0 ? 'ok' : 'degraded',
      nodeName: this.config.nodeName,
      version: tendrilVersion(),
      uptimeSeconds: Math.round((Date.now() - this.startedAt) / 1000),
      kvstore: { backend: kv.backend, connected: kv.connected, revision: kv.revision, detail: kv.detail },
      endpoints: this.endpoints.size,
      routingMode: this.config.routingMode,
      ...(this.nodeRegistry ? { nodes: this.nodeRegistry.list().length } : {}),
      ...(quarantined > 0 ? { quarantinedEndpoints: quarantined } : {}),
      ...(lostPolicies > 0 ? { lostPolicies } : {}),
      ipam: { mode: this.ipam.mode, allocated: (await this.ipam.list()).length },
      ...(k8s ? { kubernetes: k8s } : {}),
      datapath,
      services: { count: services.length, backends: services.reduce((n, svc) => n + svc['backend-addresses'].length, 0) },
      policies: { count: this.policy.policies().length, endpointsEnforced: this.endpoints.list().filter((ep) => this.policyEnforced(ep.id)).length },
      masquerade: this.masqueradeStatus(datapath),
    };
  }

  /** Whether a policy puts either direction of the endpoint in default-deny (false for one the engine does not know yet). */
  private policyEnforced(id: number): boolean {
    try {
      const e = this.policy.engine.endpointPolicy(id).enforcement;
      return e.ingress.enforced || e.egress.enforced;
    } catch (err) {
      if (err instanceof UnknownEndpointError) return false;
      throw err;
    }
  }

  /** What the kernel has: programs attached, the bpffs, the fullest maps, recent drops (eBPF datapath only). */
  private async datapathStatus(): Promise<DatapathStatus> {
    const observability = this.observability;
    if (!observability) return { kind: this.config.datapath };
    const bpffs = this.ownedDatapath?.bpffs;
    const usage = await pinnedDatapathSource(observability.bpf.inspector).mapUsage();
    const fullest = usage.filter((u) => u.maxEntries > 0).sort((a, b) => b.entries / b.maxEntries - a.entries / a.maxEntries || a.map.localeCompare(b.map)).slice(0, 3);
    return {
      kind: 'bpf',
      ...(bpffs ? { bpffs: { ...bpffs, ...(bpffs.sharing === 'private' ? { fix: PRIVATE_BPFFS_FIX } : {}) } } : {}),
      ...(this.datapath.attachmentStatus ? { programs: await this.datapath.attachmentStatus() } : {}),
      maps: fullest,
      drops: await observability.drops.recent(),
    };
  }

  /** On or off, and where: the eBPF masquerade runs on the node devices the datapath attached to. */
  private masqueradeStatus(datapath: DatapathStatus): NonNullable<Health['masquerade']> {
    const bpf = datapath.kind === 'bpf';
    const devices = (datapath.programs?.devices ?? []).filter((d) => d.role === 'node').map((d) => d.name);
    return {
      enabled: this.config.masquerade,
      ...(this.config.masquerade ? { by: bpf ? ('bpf' as const) : ('nftables' as const) } : {}),
      cidrs: this.config.masquerade ? nodeMasqueradeCidrs(this.config) : [],
      devices: this.config.masquerade && bpf ? devices : [],
      natPortRanges: this.config.masquerade ? (this.ownedDatapath?.natPortRanges ?? []) : [],
    };
  }

  /** GET /healthz on the metrics address: as on the socket, not ready until Kubernetes' first sync. */
  private async readiness(): Promise<{ status: string } | { notReady: string }> {
    const h = await this.health();
    return h.kubernetes && !h.kubernetes.synced ? { notReady: k8sNotSyncedMessage(h.kubernetes) } : { status: h.status };
  }

  private publicConfig(): AgentConfigView {
    const { kvstoreOpts } = this.config;
    // Credentials passed as kvstore options are not for API readers.
    const redacted = Object.fromEntries(Object.entries(kvstoreOpts).map(([k, v]) => [k, /pass|key|token/i.test(k) ? '***' : v]));
    return userConfigView({ ...this.config, kvstoreOpts: redacted }) as AgentConfigView;
  }

  private patchConfig(patch: ConfigPatch): AgentConfigView {
    if (typeof patch.logLevel === 'string') {
      this.log.level = patch.logLevel;
      (this.config as { logLevel: string }).logLevel = patch.logLevel;
    }
    if (typeof patch.ipamExpiration === 'number') (this.config as { ipamExpirationMs: number }).ipamExpirationMs = patch.ipamExpiration;
    this.log.info({ patch }, 'configuration changed');
    return this.publicConfig();
  }

  /** Where GET /metrics is served over TCP, as bound (the port chosen for :0); undefined when off. */
  get prometheusAddress(): { host: string; port: number } | undefined {
    return this.metricsServer?.address;
  }

  /** Stops serving; pods keep their network, and state stays for the next start. A second call waits for the first. */
  stop(): Promise<void> {
    this.stopping ??= this.stopOnce();
    return this.stopping;
  }

  private async stopOnce(): Promise<void> {
    await this.server?.close();
    await this.metricsServer?.close();
    // First: nothing the API server says changes the subsystems while they stop.
    await this.kubernetes?.stop();
    await this.observability?.stop();
    await this.policyStore.stop();
    await this.policyLedger.stop();
    this.unsubscribeEndpoints();
    await this.services.stop();
    await this.endpoints.stop();
    await this.stopNodes();
    await this.ipcacheSync.stop();
    await this.identities.close();
    // The lease is not revoked: another agent start within its TTL keeps this node's entries alive.
    await this.lease.stop();
    await this.ipam.stop();
    await this.backend.close();
    // Handles only: programs and maps stay in force, so pods keep being enforced while the agent is down.
    await this.ownedDatapath?.close();
    await this.nodeClaim?.release();
    this.log.info('agent stopped; pod networking left in place');
  }
}
