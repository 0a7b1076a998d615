import { mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { deletionQueueSockets, drainDeletionQueues } from '../api/deletionQueueDrain.js';
import { buildServer, checkSocketPath, listenOnSocket } from '../api/server/server.js';
import { hostPort } from '../api/server/listenAccess.js';
import { announcedFlowsAddress, startFlowsListener } from './flowsListener.js';
import type { FlowsListener } from '../api/server/flowsListener.js';
import type { AgentApi } from '../api/server/server.js';
import type { Datapath } from '../datapath/types.js';
import type { Underlay } from '../datapath/linux/underlay.js';
import { EndpointManager, EndpointStore, PolicyRevisions } from '../endpoint/index.js';
import { UndoList } from '../async/undoList.js';
import { type IdentityAllocator, NodeLease } from '../identity/index.js';
import { attachmentOfOwner, IpamProvider, ipamOwner } from '../ipam/index.js';
import { IPCache, IpcacheCidrIdentities, KvstoreIPCacheSync, NodeAddressEntries } from '../ipcache/index.js';
import { configWithNode, k8sEnabled, loadKubernetes, registryAddresses, requireKubernetesForIpam, type RetryOptions } from '../k8s/index.js';
import type { AgentKubernetes, KubernetesNodeRegistry } from '../k8s/kubernetes.js';
import { defaultEmbeddedPath } from '../kvstore/embedded/embeddedOptions.js';
import { openBackend } from '../kvstore/factory.js';
import type { Backend } from '../kvstore/types.js';
import { LabelFilter } from '../labels/index.js';
import type { Logger } from '../logging/logger.js';
import { AgentMetrics, countedBackend, countedCni, MetricsServer } from '../metrics/index.js';
import type { PodRef } from '../monitor/index.js';
import { clusterAddressOwner, HostAddresses, OwnNode } from '../node/index.js';
import { PolicyEngine } from '../policy/index.js';
import { PolicyStore } from '../policy/store/index.js';
import { PolicyLedger } from '../policy/store/policyLedger.js';
import { ServiceManager, ServiceStore } from '../service/index.js';
import { type AgentDatapath, openAgentDatapath } from './agentDatapath.js';
import { agentApi, type AgentParts, endpointLease, metricsSources, readiness } from './agentApi.js';
import { type BpfObservability, bpfObservabilityOf } from './bpfObservability.js';
import { CniService } from './cniService.js';
import { kubernetesIpcacheSync, kubernetesNodeRegistry, provisionalOwnRecord, startClusterIdentities, withOperatorPodCidrs } from './clusterState.js';
import { type AgentConfig, ConfigError, k8sConnection, nodeMasqueradeCidrs } from './config.js';
import { readInterfaceAddresses } from './interfaceAddresses.js';
import { type NodeBasics, nodeBasics } from './nodeBasics.js';
import { type NodeClaim, type NodeLock, NetnsNodeLock } from './nodeLock.js';
import { writeRunRecord } from './runRecord.js';

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

/** What start-up has made before the agent itself: the kvstore and the subsystems on it, started. */
interface Foundation {
  backend: Backend;
  lease: NodeLease;
  ipam: IpamProvider;
  identities: IdentityAllocator;
  ipcache: IPCache;
  /** kvstore mode's ipcache sync; crd mode's is made once the endpoints exist (serve). */
  ipcacheSync: KvstoreIPCacheSync | undefined;
  /** crd mode's node registry (TendrilNode objects, Leases); kvstore mode's OwnNode makes its own. */
  registry: KubernetesNodeRegistry | undefined;
  /** The node IP: given, the underlay's, or the router address. */
  nodeIp: string;
  /** The node's IPv6 InternalIP next to an IPv4 node IP (the underlay's), if any. */
  nodeIp6: string | undefined;
  /** The agent's own registry: kvstore operations are counted from the start, state is read at scrape. */
  metrics: AgentMetrics;
}

/**
 * The node agent: wires the kvstore, IPAM, identities, ipcache, policy, the
 * endpoint manager, services, the node registry and the datapath together,
 * and serves the API through the narrow interfaces of `api()`. Stopping it
 * leaves every pod's network in place.
 *
 * Every subsystem's stop is pushed on one LIFO teardown as it starts (the
 * endpoint's UndoList): stop() and a start that fails half-way run the same
 * list, so a failed start stops exactly what it had started.
 */
export class Agent {
  private server: FastifyInstance | undefined;
  private nodeClaim: NodeClaim | undefined;
  private readonly startedAt = Date.now();
  private readonly policy: PolicyRevisions;
  /** Imported policies in the kvstore: restored before endpoints, shared by the cluster's nodes. */
  private readonly policyStore: AgentParts['policyStore'];
  /** What this node enforced, in its state dir: a kvstore that lost policies is noticed, the revision never goes back. */
  private readonly policyLedger: PolicyLedger;
  /** The node's own addresses: the router addresses, and all of them in the ipcache as identity `host`. */
  private readonly hostAddresses: HostAddresses;
  private readonly nodeAddresses: NodeAddressEntries;
  private readonly endpointStore: EndpointStore;
  private readonly endpoints: EndpointManager;
  /** Services: restored before endpoints, their Local entries following the endpoints. */
  private readonly services: ServiceManager;
  /** This node in the registry and the others' ipcache entries and routes: started after the ipcache sync, before endpoints are restored. */
  private readonly ownNode: OwnNode;
  private readonly cni: CniService;
  private readonly cniHandler: AgentParts['cniHandler'];
  /** GET /metrics over TCP (--prometheus-serve-addr); absent when off. */
  private metricsServer: MetricsServer | undefined;
  /** The flows over TCP for a relay (--flows-listen-addr); absent when off. */
  private flowsListener: FlowsListener | undefined;
  /** The datapath this agent opened (not one a test handed in): its handles are let go at stop. */
  private ownedDatapath: AgentDatapath | undefined;
  /** Monitor, /v1/bpf/* and conntrack GC: only with the eBPF datapath. */
  private readonly observability: BpfObservability | undefined;
  private stopping: Promise<void> | undefined;

  private constructor(
    private readonly config: AgentConfig,
    private readonly log: Logger,
    private readonly f: Foundation,
    private readonly datapath: Datapath,
    podMtu: number,
    /** The Kubernetes watchers; absent when Kubernetes is off. */
    private readonly kubernetes: AgentKubernetes | undefined,
    /** Each subsystem's stop, newest first (see the class comment). */
    private readonly teardown: UndoList,
  ) {
    const { backend, ipam, identities, ipcache, metrics } = f;
    const faultPoint = faultPointFromEnv(process.env);
    this.endpointStore = new EndpointStore(join(config.stateDir, 'endpoints'));
    // CIDR identities of policies come with their ipcache entries, so the datapath classifies those ranges.
    this.policy = new PolicyRevisions(new PolicyEngine({ identities, cidrIdentities: new IpcacheCidrIdentities(identities, ipcache), maxEntriesPerEndpoint: config.policyEndpointMaxEntries }), log.child({ subsys: 'policy' }));
    this.policyStore = new PolicyStore({ backend, target: this.policy, logger: log.child({ subsys: 'policy-store' }) });
    this.policyLedger = new PolicyLedger(config.stateDir, log.child({ subsys: 'policy-store' }));
    this.nodeAddresses = new NodeAddressEntries(ipcache, config.nodeName);
    this.hostAddresses = new HostAddresses({
      entries: this.nodeAddresses,
      nodeIp: f.nodeIp,
      setupNode: (routerAddresses) => datapath.setupNode({ routerAddresses, masqueradeCidrs: nodeMasqueradeCidrs(config) }),
      changed: (why) => {
        this.ownNode.publish(why);
        // A NodePort on :: is served on each node IPv6 address, the new router address too.
        this.services.nodeAddressesChanged().catch((err: unknown) => log.error({ err }, 'updating services after a node address change failed'));
      },
    });
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
    this.ownNode = new OwnNode({
      ...(f.registry ? { registry: f.registry } : { backend, lease: f.lease }),
      nodeName: config.nodeName,
      ipcache,
      ...(datapath.nodeRouting ? { routing: datapath.nodeRouting } : {}),
      logger: log.child({ subsys: 'nodes' }),
      facts: async () => ({
        nodeIp: f.nodeIp,
        ...(f.nodeIp6 === undefined ? {} : { nodeIp6: f.nodeIp6 }),
        otherAddresses: registryAddresses(this.kubernetes?.ownNode, f.nodeIp),
        routerAddresses: [...this.hostAddresses.routerAddresses()],
        podCidrs: ipam.podCidrs(),
        routingMode: config.routingMode,
        tunnel: { protocol: config.tunnelProtocol, port: config.tunnelPort },
        kvstore: await backend.status(),
        startedAt: new Date(this.startedAt),
        ...(this.flowsListener ? { flows: announcedFlowsAddress(this.flowsListener, f.nodeIp) } : {}),
      }),
      onPodCidrsChanged: (cb) => ipam.onPodCidrsChanged(cb),
    });
    this.services = new ServiceManager({
      loadBalancer: datapath.loadBalancer,
      store: new ServiceStore(join(config.stateDir, 'services')),
      log: log.child({ subsys: 'service' }),
      algorithm: config.lbAlgorithm,
      maglevTableSize: config.lbMaglevTableSize,
      // Both families: a Local service's IPv6 backends on this node are as local as its IPv4 ones.
      localAddresses: () => this.endpoints.list().flatMap((ep) => ep.addresses.map((a) => a.ip)),
      nodeAddresses: () => this.nodeAddresses.addresses.map((p) => p.slice(0, p.indexOf('/'))),
      routerAddresses: () => this.hostAddresses.routerAddresses(),
      podCidrs: () => ipam.podCidrs(),
      addressOwner: (ip) => clusterAddressOwner(ip, { ipcache, nodeName: config.nodeName, nodes: this.ownNode.registry?.list() ?? [] }),
    });
    // An endpoint that comes or goes changes which backends are local (externalTrafficPolicy Local).
    const unsubscribeEndpoints = this.endpoints.subscribe((change) => {
      if (change.from !== undefined && change.to !== 'disconnected') return;
      this.services.localityChanged().catch((err: unknown) => log.error({ err }, 'updating services after an endpoint change failed'));
    });
    this.cni = new CniService({
      config,
      ipam,
      endpoints: this.endpoints,
      log,
      podMtu,
      ready: async () => (await backend.status()).connected,
      ...(faultPoint ? { faultPoint } : {}),
      ensureRouterAddress: (family, ip) => this.hostAddresses.ensureRouter(family, ip),
      ...(kubernetes ? { kubernetes } : {}),
    });
    this.cniHandler = countedCni(this.cni, metrics);
    const podRefs = new WeakMap<object, PodRef>();
    this.observability = bpfObservabilityOf(datapath, {
      log,
      identities,
      policy: this.policy,
      endpointPod: (id) => {
        const ep = this.endpoints.get(id);
        if (ep?.podNamespace === undefined || ep.podName === undefined) return undefined;
        // One object per endpoint record: the flow history holds it for every flow of the pod.
        let pod = podRefs.get(ep);
        if (pod === undefined) podRefs.set(ep, (pod = { namespace: ep.podNamespace, name: ep.podName }));
        return pod;
      },
      serviceName: (id) => this.kubernetes?.watchers.serviceName(id),
      nodeName: config.nodeName,
      flowHistorySize: config.flowHistorySize,
      ...(metrics.flows ? { flowMetrics: metrics.flows } : {}),
    });
    // Newest first: the nodes go after the endpoints, the endpoints after the services, and first of
    // all the API server and the watchers, so nothing changes the subsystems while they stop.
    teardown.add(() => this.ownNode.stop(), 'node registry');
    teardown.add(() => this.endpoints.stop(), 'endpoints');
    teardown.add(() => this.services.stop(), 'services');
    teardown.add(async () => unsubscribeEndpoints(), 'endpoint subscription');
    teardown.add(() => this.policyLedger.stop(), 'policy ledger');
    teardown.add(() => this.policyStore.stop(), 'policy store');
    teardown.add(async () => this.observability?.stop(), 'bpf observability');
    teardown.add(async () => this.kubernetes?.stop(), 'kubernetes');
    teardown.add(async () => this.metricsServer?.close(), 'metrics server');
    teardown.add(async () => this.flowsListener?.close(), 'flows listener');
    teardown.add(async () => this.server?.close(), 'API server');
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
      const { AgentKubernetes } = await loadKubernetes();
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
      if (given.identityAllocationMode === 'crd') {
        throw new ConfigError('--identity-allocation-mode crd keeps the cluster\'s state in the Kubernetes API server: give --k8s-kubeconfig or --k8s-api-server, or run the agent in a pod with a service account');
      }
    }
    try {
      const config = configWithNode(given, await kubernetes?.loadOwnNode());
      return await Agent.startWith(config, log, deps, kubernetes);
    } catch (err) {
      await kubernetes?.stop();
      throw err;
    }
  }

  private static async startWith(given: AgentConfig, log: Logger, deps: AgentDeps, kubernetes: AgentKubernetes | undefined): Promise<Agent> {
    // crd mode with cluster-pool IPAM: the pod CIDRs come from tendril-operator, put in below.
    let config = given;
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
    const teardown = new UndoList();
    // Pushed first, run last: handles only, so programs and maps stay in force while the agent is down.
    let opened: AgentDatapath | undefined;
    teardown.add(async () => opened?.close(), 'datapath handles');
    try {
      const metrics = new AgentMetrics(config.flowMetrics ? { flows: { labels: config.flowMetricsLabels } } : {});
      const backend = countedBackend(await openBackend({ kind: config.kvstore, options: config.kvstoreOpts, dataDir: config.libDir, logger: log.child({ subsys: 'kvstore' }) }), metrics);
      teardown.add(() => backend.close(), 'kvstore');
      const registry = await kubernetesNodeRegistry(config, { kubernetes, retry: deps.kubernetes?.retry, logger: log.child({ subsys: 'nodes' }) });
      teardown.add(async () => registry?.stop(), 'node registry (crd)');
      config = await withOperatorPodCidrs(config, registry, provisionalOwnRecord(config, basics), log.child({ subsys: 'ipam' }));
      const ipam = new IpamProvider(config, backend, log.child({ subsys: 'ipam' }));
      await ipam.start();
      teardown.add(() => ipam.stop(), 'IPAM');
      // The lease is not revoked at stop: another agent start within its TTL keeps this node's entries alive.
      const lease = new NodeLease(backend, { ttlSeconds: config.leaseTtlSeconds, logger: log.child({ subsys: 'lease' }) });
      teardown.add(() => lease.stop(), 'node lease');
      const identities = await startClusterIdentities(config, { backend, lease, kubernetes, retry: deps.kubernetes?.retry, logger: log.child({ subsys: 'identity' }) });
      teardown.add(() => identities.close(), 'identities');
      const ipcache = new IPCache({ logger: log.child({ subsys: 'ipcache' }) });
      const nodeIp = basics.ip ?? ipam.routerAddresses().find((r) => r.family === 4)?.ip ?? ipam.routerAddresses()[0]?.ip ?? '0.0.0.0';
      const ipcacheSync =
        config.identityAllocationMode === 'kvstore'
          ? new KvstoreIPCacheSync({
              ...{ backend, ipcache, nodeName: config.nodeName, nodeIP: nodeIp, lease, logger: log.child({ subsys: 'ipcache' }) },
              ...(basics.ip6 === undefined ? {} : { nodeIP6: basics.ip6 }),
            })
          : undefined;
      await ipcacheSync?.start();
      teardown.add(async () => ipcacheSync?.stop(), 'ipcache sync');
      // The eBPF datapath loads its objects (maps reused from the pins) before any endpoint is restored.
      opened = deps.datapath ? undefined : await openAgentDatapath(config, ipcache, log, { podMtu: basics.podMtu, nodeIp, ...(basics.ip6 === undefined ? {} : { nodeIp6: basics.ip6 }) });
      const foundation = { backend, lease, ipam, identities, ipcache, ipcacheSync, registry, nodeIp, nodeIp6: basics.ip6, metrics };
      const agent = new Agent(config, log, foundation, deps.datapath ?? opened!.datapath, basics.podMtu, kubernetes, teardown);
      agent.ownedDatapath = opened;
      await agent.serve(deps, basics);
      return agent;
    } catch (err) {
      await teardown.rollBack(log, 'rollback step failed', { during: 'agent teardown' });
      throw err;
    }
  }

  /** Start-up once every subsystem exists: the order in which they come up, then the API. */
  private async serve(deps: AgentDeps, basics: NodeBasics): Promise<void> {
    const { config, log, f } = this;
    await this.hostAddresses.setRouters(f.ipam.routerAddresses());
    f.metrics.bind(metricsSources(this.parts()));
    await this.hostAddresses.refresh(deps.interfaceAddresses ?? (deps.datapath ? async () => [] : readInterfaceAddresses));
    // Before the node's record is published: the record announces where it listens (the port bound for :0).
    if (config.flowsListenAddr !== undefined) this.flowsListener = await startFlowsListener(config, this.api(), log.child({ subsys: 'flows' }));
    await this.ownNode.start();
    // crd mode: the other nodes' pods once the registry says which nodes are alive; this node's as its endpoints come.
    const crdSync = await kubernetesIpcacheSync(config, { kubernetes: this.kubernetes, retry: deps.kubernetes?.retry, logger: log.child({ subsys: 'ipcache' }), ipcache: f.ipcache, endpoints: this.endpoints, nodes: this.ownNode.registry!, nodeIp: f.nodeIp, nodeIp6: f.nodeIp6 });
    if (crdSync) {
      crdSync.feed.start();
      this.teardown.add(async () => {
        crdSync.feed.stop();
        await crdSync.sync.stop();
      }, 'ipcache sync (crd)');
      await crdSync.sync.start();
    }
    // Policies before endpoints: a restored endpoint's first regeneration already holds them, so
    // the pinned maps that enforced while the agent was down are never rewritten without them.
    // The ledger is read before the store's first listing can change it, compared after.
    const recordedPolicies = await this.policyLedger.load();
    await this.policyStore.start();
    await this.policyLedger.start(recordedPolicies, this.policyStore, this.policy, this.policy);
    // Services before endpoints: backends keep their IDs (conntrack pins connections to them), and
    // entries of services deleted while the agent was down go before any endpoint is synced.
    await this.services.restore();
    // Kubernetes after the stored policies and services, before endpoints: the policies and services
    // the API server holds are in force when restored endpoints regenerate.
    await this.startKubernetes();
    await this.endpoints.restore({
      lease: (ep) => endpointLease(f.ipam, ep),
      // IPAM may have lost the addresses (a kvstore that lost its latest writes): held for their endpoints again.
      reclaim: (ep) => (ep.ipamOwned ? f.ipam.reclaim(ipamOwner(ep.containerId, ep.ifName), ep.addresses) : Promise.resolve({ addresses: ep.addresses, reclaimed: [] })),
      // A restored endpoint's routes take its gateway as source address: the host device must hold it first.
      prepare: async (ep) => {
        for (const a of ep.addresses) await this.hostAddresses.ensureRouter(a.family, a.gateway);
      },
      // The orphan sweep tells an interrupted ADD (a provisional address) from a committed endpoint's pod.
      addressOwners: async () => (f.ipam.mode === 'delegated' ? undefined : (await f.ipam.list()).map((a) => ({ ...attachmentOfOwner(a.owner), provisional: a.expiresAt !== undefined }))),
    });
    // Labels changed while the agent was down (pods relabelled, namespaces too) reach the restored endpoints.
    await this.kubernetes?.reconcileEndpoints();
    // This node's TendrilEndpoints no restored endpoint published (pods deleted while the agent was down): in the background, the API server may be away.
    crdSync?.sync.pruneStale().catch((err: unknown) => log.error({ err }, 'pruning stale TendrilEndpoints failed'));
    // Pinned datapath state of endpoints that did not come back goes now (the restored ones are synced).
    await this.datapath.restoreDone?.(this.endpoints.list().map((ep) => ({ id: ep.id, hostIfName: ep.hostIfName })));
    // Which backends are local is known now: Local services take it from the endpoints from here on.
    await this.services.endpointsRestored();
    // Drained before serving, so a client that sees the API up sees the queue done;
    // and once more after, for a DEL a plugin queued while the socket was not up yet.
    await this.drainDeletionQueues();
    // Before the socket: an address that cannot be bound fails the start before clients see the API up.
    if (config.prometheusServeAddr !== undefined) this.metricsServer = await MetricsServer.start(config.prometheusServeAddr, f.metrics, log.child({ subsys: 'metrics' }), () => readiness(this.parts()));
    this.server = buildServer(this.api());
    await listenOnSocket(this.server, config.socket);
    await this.observability?.start();
    await this.drainDeletionQueues();
    const { underlay } = basics;
    const k8s = this.kubernetes?.status();
    log.info(
      {
        socket: config.socket,
        ...(this.metricsServer ? { prometheus: `${this.metricsServer.address.host}:${this.metricsServer.address.port}` } : {}),
        ...(this.flowsListener ? { flows: hostPort(this.flowsListener.address.host, this.flowsListener.address.port) } : {}),
        ipam: config.ipam,
        routers: f.ipam.routerAddresses(),
        endpoints: this.endpoints.size,
        nodeIp: f.nodeIp,
        routingMode: config.routingMode,
        podMtu: basics.podMtu,
        underlay: underlay && { device: underlay.device, mtu: underlay.mtu },
        ...(k8s ? { kubernetes: { apiServer: k8s.apiServer, synced: k8s.synced } } : {}),
      },
      'agent ready',
    );
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
    k8s.followOwnNode(() => this.ownNode.publish('Node addresses changed'));
  }

  /** What the API serves, each part a narrow interface over the subsystems. */
  api(): AgentApi {
    return agentApi(this.parts());
  }

  private parts(): AgentParts {
    const { config, log, startedAt, datapath, policy, policyStore, policyLedger, endpoints, endpointStore, services, cni, cniHandler, ownNode, kubernetes, observability, ownedDatapath } = this;
    const { backend, ipam, identities, ipcache, metrics } = this.f;
    return { config, log, startedAt, backend, ipam, datapath, identities, ipcache, metrics, policy, policyStore, policyLedger, endpoints, endpointStore, services, cni, cniHandler, ownNode, kubernetes, observability, ownedDatapath };
  }

  private drainDeletionQueues(): Promise<void> {
    return drainDeletionQueues(deletionQueueSockets(this.config.socket, this.config.stateDir), { cni: this.cniHandler, endpointOf: (containerId, ifName) => this.endpoints.byContainer(containerId, ifName) }, this.log);
  }

  /** Where the flows are served over TCP, as bound (the port chosen for :0); undefined when off. */
  get flowsAddress(): { host: string; port: number } | undefined {
    return this.flowsListener?.address;
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
    await this.teardown.rollBack(this.log, 'rollback step failed', { during: 'agent teardown' });
    await this.nodeClaim?.release();
    this.log.info('agent stopped; pod networking left in place');
  }
}
