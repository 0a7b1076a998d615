import { mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { listQueuedDeletions, removeQueuedDeletion } from '../api/deletionQueue.js';
import { AgentError } from '../api/errors.js';
import type { CniRequest, Health } from '../api/types.js';
import { LinuxDatapath } from '../datapath/linux/linuxDatapath.js';
import type { Datapath } from '../datapath/types.js';
import type { Endpoint } from '../endpoint/endpoint.js';
import { EndpointManager } from '../endpoint/endpointManager.js';
import { EndpointStore } from '../endpoint/endpointStore.js';
import { EndpointIdentityBinder } from '../endpoint/identityBinder.js';
import { IdentityAllocator, NodeLease } from '../identity/index.js';
import { IPCache, KvstoreIPCacheSync } from '../ipcache/index.js';
import { LabelFilter, type LabelSet } from '../labels/index.js';
import { type EndpointRegeneration, PolicyEngine } from '../policy/index.js';
import { openBackend } from '../kvstore/factory.js';
import type { Backend } from '../kvstore/types.js';
import type { Logger } from '../logging/logger.js';
import { buildServer, listenOnSocket } from './api/server.js';
import { CniService, ipamOwner } from './cniService.js';
import { type AgentConfig, masqueradeCidrs } from './config.js';
import { IpamProvider } from './ipamProvider.js';

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
  datapath?: Datapath;
}

/**
 * The node agent: owns the kvstore connection, IPAM, the endpoints and the
 * datapath, and serves the API. Stopping it leaves every pod's network in place.
 */
export class Agent {
  readonly endpoints = new EndpointManager();
  readonly store: EndpointStore;
  readonly cni: CniService;
  private server: FastifyInstance | undefined;
  private readonly startedAt = Date.now();
  private readonly routerAddresses = new Map<string, { family: 4 | 6; ip: string }>();

  readonly ipcache: IPCache;
  readonly policy: PolicyEngine;
  private readonly binder: EndpointIdentityBinder;
  private unsubscribeIdentities: (() => void) | undefined;

  private constructor(
    readonly config: AgentConfig,
    readonly log: Logger,
    readonly backend: Backend,
    readonly ipam: IpamProvider,
    readonly datapath: Datapath,
    readonly lease: NodeLease,
    readonly identities: IdentityAllocator,
    readonly ipcacheSync: KvstoreIPCacheSync,
    ipcache: IPCache,
  ) {
    this.store = new EndpointStore(join(config.stateDir, 'endpoints'));
    this.ipcache = ipcache;
    this.policy = new PolicyEngine({ identities, cidrIdentities: identities });
    // Identities other nodes create change which peers a selector names: recompute incrementally.
    this.unsubscribeIdentities = identities.subscribe((events) => {
      const added = events.filter((e) => e.type === 'upsert').map((e) => e.identity);
      const removed = events.filter((e) => e.type === 'delete').map((e) => e.identity.id);
      this.applyRegenerations(this.policy.identitiesChanged(added, removed).regenerations);
    });
    this.binder = new EndpointIdentityBinder(identities, ipcache, LabelFilter.DEFAULT, this.policy);
    this.cni = new CniService({
      config,
      ipam,
      datapath,
      endpoints: this.endpoints,
      store: this.store,
      identities: this.binder,
      log,
      ready: async () => (await this.backend.status()).connected,
      faultPoint: faultPointFromEnv(process.env),
      ensureRouterAddress: (family, ip) => this.ensureRouterAddress(family, ip),
    });
  }

  static async start(config: AgentConfig, log: Logger, deps: AgentDeps = {}): Promise<Agent> {
    await mkdir(config.stateDir, { recursive: true, mode: 0o700 });
    await mkdir(dirname(config.socket), { recursive: true, mode: 0o700 });
    const backend = await openBackend({ kind: config.kvstore, options: config.kvstoreOpts, dataDir: config.libDir, logger: log.child({ subsys: 'kvstore' }) });
    const lease = new NodeLease(backend, { ttlSeconds: config.leaseTtlSeconds, logger: log.child({ subsys: 'lease' }) });
    try {
      const ipam = new IpamProvider(config, backend, log.child({ subsys: 'ipam' }));
      await ipam.start();
      const identities = new IdentityAllocator({ backend, nodeName: config.nodeName, lease, logger: log.child({ subsys: 'identity' }) });
      await identities.start();
      const ipcache = new IPCache({ logger: log.child({ subsys: 'ipcache' }) });
      const nodeIP = config.nodeIp ?? ipam.routerAddresses().find((r) => r.family === 4)?.ip ?? ipam.routerAddresses()[0]?.ip ?? '0.0.0.0';
      const ipcacheSync = new KvstoreIPCacheSync({ backend, ipcache, nodeName: config.nodeName, nodeIP, lease, logger: log.child({ subsys: 'ipcache' }) });
      await ipcacheSync.start();
      const agent = new Agent(config, log, backend, ipam, deps.datapath ?? new LinuxDatapath(), lease, identities, ipcacheSync, ipcache);
      for (const r of ipam.routerAddresses()) agent.routerAddresses.set(r.ip, r);
      await agent.datapath.setupNode({ routerAddresses: [...agent.routerAddresses.values()], masqueradeCidrs: masqueradeCidrs(config) });
      await agent.restoreEndpoints();
      // Drained before serving, so a client that sees the API up sees the queue done;
      // and once more after, for a DEL a plugin queued while the socket was not up yet.
      await agent.drainDeletionQueue();
      agent.server = buildServer(agent);
      await listenOnSocket(agent.server, config.socket);
      await agent.drainDeletionQueue();
      log.info({ socket: config.socket, node: config.nodeName, ipam: config.ipam, routers: ipam.routerAddresses(), endpoints: agent.endpoints.size }, 'agent ready');
      return agent;
    } catch (err) {
      await lease.stop();
      await backend.close();
      throw err;
    }
  }

  private async ensureRouterAddress(family: 4 | 6, ip: string): Promise<void> {
    if (this.routerAddresses.has(ip)) return;
    this.routerAddresses.set(ip, { family, ip });
    await this.datapath.setupNode({ routerAddresses: [...this.routerAddresses.values()], masqueradeCidrs: masqueradeCidrs(this.config) });
  }

  /** Brings endpoints back from the state dir; pods that vanished while the agent was down are cleaned up. */
  private async restoreEndpoints(): Promise<void> {
    const { endpoints, problems } = await this.store.loadAll();
    for (const p of problems) this.log.error({ dir: p.dir, error: p.error }, 'cannot restore endpoint state');
    for (const ep of endpoints) {
      if (ep.state === 'disconnecting' || !(await this.datapath.podExists(ep.containerId, ep.ifName, ep.hostIfName))) {
        this.log.warn({ endpoint: ep.id, containerId: ep.containerId }, 'endpoint vanished while the agent was down; releasing it');
        for (const a of this.ipam.all()) await a.releaseOwner(ipamOwner(ep.containerId, ep.ifName));
        await this.store.remove(ep.id);
        continue;
      }
      // The same identity number comes back unless another node re-used it while this one was away.
      const bound = await this.binder.bind(ep, ep.identity);
      if (ep.identity !== undefined && bound.identity !== ep.identity) {
        this.log.warn({ endpoint: ep.id, was: ep.identity, now: bound.identity }, 'restored endpoint got a new identity');
      }
      const restored = { ...bound, state: 'ready' as const };
      this.endpoints.register(restored);
      await this.store.save(restored);
      // An agent killed between saving the endpoint and confirming IPAM must not let the address expire under it.
      for (const a of this.ipam.all()) await a.confirm(ipamOwner(ep.containerId, ep.ifName));
      if (ep.addresses.some((a) => !this.routerAddresses.has(a.gateway))) {
        for (const a of ep.addresses) await this.ensureRouterAddress(a.family, a.gateway);
      }
    }
    if (endpoints.length > 0) this.log.info({ restored: this.endpoints.size }, 'endpoints restored');
    // An agent killed mid-ADD can leave a veth pair no endpoint owns; its address expires by itself.
    const owned = new Set(this.endpoints.list().map((e) => e.hostIfName));
    for (const name of await this.datapath.listPodHostInterfaces()) {
      if (owned.has(name)) continue;
      this.log.warn({ interface: name }, 'removing pod interface no endpoint owns');
      await this.datapath.removeHostInterface(name);
    }
  }

  /** DELs the plugin queued while the agent was unreachable. */
  private async drainDeletionQueue(): Promise<void> {
    const sockets = new Set([this.config.socket, join(this.config.stateDir, 'tendril.sock')]);
    for (const socket of sockets) {
      for (const q of await listQueuedDeletions(socket)) {
        if (q.request === undefined) {
          this.log.error({ file: q.file }, 'unreadable queued deletion; dropping it');
          await removeQueuedDeletion(q.file);
          continue;
        }
        try {
          await this.cni.handle({ ...(q.request as CniRequest), command: 'DEL' });
          this.log.info({ file: q.file }, 'queued deletion done');
          await removeQueuedDeletion(q.file);
        } catch (err) {
          const e = err instanceof AgentError ? err : undefined;
          if (e && e.httpStatus < 500) {
            this.log.error({ file: q.file, err }, 'queued deletion is invalid; dropping it');
            await removeQueuedDeletion(q.file);
          } else {
            this.log.error({ file: q.file, err }, 'queued deletion failed; kept for the next start');
          }
        }
      }
    }
  }

  /**
   * Policy results per endpoint. The Linux datapath has no policy maps yet, so
   * the map state is computed and served (GET /endpoint/{id}/policy) but not
   * enforced; an overflow is logged against the endpoint.
   */
  applyRegenerations(regenerations: readonly EndpointRegeneration[]): void {
    for (const r of regenerations) {
      if (r.error) this.log.error({ endpoint: r.endpointId, entries: r.entries, err: r.error.message }, 'endpoint policy does not fit its map');
      else this.log.debug({ endpoint: r.endpointId, revision: r.policyRevision, entries: r.entries }, 'endpoint policy recomputed');
    }
  }

  async deleteEndpoint(ep: Endpoint): Promise<void> {
    await this.cni.removeEndpoint(ep, ep.netns);
  }

  updateLabels(ep: Endpoint, labels: LabelSet): Promise<Endpoint> {
    return this.cni.updateLabels(ep, labels);
  }

  async health(): Promise<Health> {
    const kv = await this.backend.status();
    let allocated = 0;
    for (const a of this.ipam.all()) allocated += (await a.list()).length;
    return {
      status: kv.connected ? 'ok' : 'degraded',
      nodeName: this.config.nodeName,
      uptimeSeconds: Math.round((Date.now() - this.startedAt) / 1000),
      kvstore: { backend: kv.backend, connected: kv.connected, revision: kv.revision, detail: kv.detail },
      endpoints: this.endpoints.size,
      ipam: { mode: this.ipam.mode, allocated },
    };
  }

  publicConfig(): Record<string, unknown> {
    const { kvstoreOpts, ...rest } = this.config;
    // Credentials passed as kvstore options are not for API readers.
    return { ...rest, kvstoreOpts: Object.fromEntries(Object.keys(kvstoreOpts).map((k) => [k, /pass|key|token/i.test(k) ? '***' : kvstoreOpts[k]])) };
  }

  patchConfig(patch: Record<string, unknown>): Record<string, unknown> {
    if (typeof patch.logLevel === 'string') {
      this.log.level = patch.logLevel;
      (this.config as { logLevel: string }).logLevel = patch.logLevel;
    }
    if (typeof patch.ipamExpirationMs === 'number') (this.config as { ipamExpirationMs: number }).ipamExpirationMs = patch.ipamExpirationMs;
    this.log.info({ patch }, 'configuration changed');
    return this.publicConfig();
  }

  /** Stops serving; pods keep their network, and state stays for the next start. */
  async stop(): Promise<void> {
    await this.server?.close();
    this.unsubscribeIdentities?.();
    await this.ipcacheSync.stop();
    await this.identities.close();
    // The lease is not revoked: another agent start within its TTL keeps this node's entries alive.
    await this.lease.stop();
    await this.ipam.stop();
    await this.backend.close();
    this.log.info('agent stopped; pod networking left in place');
  }
}
