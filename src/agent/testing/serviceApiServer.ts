/**
 * For tests of the service API and CLI: a fake-node agent whose API also
 * serves /v1/service over a real ServiceManager (records in a temp dir) on
 * a socket of its own, the load-balancer maps kept in memory. No root. The
 * fake node's own socket serves the API without services (the routing
 * datapath's answer). `stop` removes everything it made.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import type { LbBackendEntry, LbServiceEntry, LoadBalancerDatapath } from '../../datapath/types.js';
import { ServiceManager } from '../../service/manager.js';
import { ServiceStore } from '../../service/serviceStore.js';
import { buildServer, listenOnSocket } from '../api/server.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './fakeNodeAgent.js';

/** The load-balancer maps as plain maps; `failNext` makes the next write fail as a kernel error would. */
export class MemoryLoadBalancer implements LoadBalancerDatapath {
  readonly services = new Map<number, LbServiceEntry>();
  readonly backends = new Map<number, LbBackendEntry>();
  failNext: Error | undefined;

  #maybeFail(): void {
    const err = this.failNext;
    this.failNext = undefined;
    if (err) throw err;
  }

  async upsertBackends(backends: readonly LbBackendEntry[]): Promise<void> {
    this.#maybeFail();
    for (const b of backends) this.backends.set(b.id, { ...b });
  }

  async deleteBackends(ids: readonly number[]): Promise<void> {
    this.#maybeFail();
    for (const id of ids) this.backends.delete(id);
  }

  async upsertService(svc: LbServiceEntry): Promise<void> {
    this.#maybeFail();
    this.services.set(svc.id, { ...svc, backendIds: [...svc.backendIds] });
  }

  async deleteService(id: number): Promise<void> {
    this.#maybeFail();
    this.services.delete(id);
  }

  async restoreDone(liveServiceIds: readonly number[], liveBackendIds: readonly number[]): Promise<void> {
    for (const id of this.services.keys()) if (!liveServiceIds.includes(id)) this.services.delete(id);
    for (const id of this.backends.keys()) if (!liveBackendIds.includes(id)) this.backends.delete(id);
  }
}

export interface ServiceApiServer {
  node: FakeNodeAgent;
  manager: ServiceManager;
  lb: MemoryLoadBalancer;
  app: FastifyInstance;
  /** The API with services. */
  socket: string;
  /** The fake node's own API: no services (409 SERVICE_UNSUPPORTED). */
  socketWithoutServices: string;
  stop(): Promise<void>;
}

export async function startServiceApiServer(opts: { nodeName: string; podCidr: string }): Promise<ServiceApiServer> {
  const dir = await mkdtemp(join(tmpdir(), `${opts.nodeName}-svc-`));
  let node: FakeNodeAgent | undefined;
  let app: FastifyInstance | undefined;
  const stop = async () => {
    await app?.close();
    await node?.stop();
    await rm(dir, { recursive: true, force: true });
  };
  try {
    node = await startFakeNodeAgent(opts);
    const lb = new MemoryLoadBalancer();
    const manager = new ServiceManager({ loadBalancer: lb, store: new ServiceStore(join(dir, 'services')), log: pino({ level: 'silent' }) });
    await manager.restore();
    app = buildServer({ ...node.agent.api(), services: manager }, { validateResponses: true });
    const socket = join(dir, 'api.sock');
    await listenOnSocket(app, socket);
    return { node, manager, lb, app, socket, socketWithoutServices: node.config.socket, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
