/**
 * For tests of the service API and CLI: a fake-node agent whose datapath has
 * the in-memory load balancer, so the agent's own ServiceManager serves
 * /v1/service. Its API is served on a socket of this helper's own with every
 * response checked against api/openapi.yaml, and on a second socket without
 * services (what the routing datapath answers). No root. `stop` removes
 * everything it made.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { FakeDatapath, type FakeLoadBalancer } from '../../datapath/fake/fakeDatapath.js';
import type { ServiceApi } from '../../service/types.js';
import { buildServer, listenOnSocket } from '../../api/server/server.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './fakeNodeAgent.js';

export interface ServiceApiServer {
  node: FakeNodeAgent;
  /** The agent's service subsystem, as the routes see it. */
  services: ServiceApi;
  /** The load-balancer maps the agent writes. */
  lb: FakeLoadBalancer;
  /** The API with services. */
  socket: string;
  /** The same API without services: 409 SERVICE_UNSUPPORTED. */
  socketWithoutServices: string;
  stop(): Promise<void>;
}

export async function startServiceApiServer(opts: { nodeName: string; podCidr: string }): Promise<ServiceApiServer> {
  const dir = await mkdtemp(join(tmpdir(), `${opts.nodeName}-svc-`));
  let node: FakeNodeAgent | undefined;
  const apps: FastifyInstance[] = [];
  const stop = async () => {
    for (const app of apps) await app.close();
    await node?.stop();
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const datapath = new FakeDatapath({ nodeLinks: ['eth0'], loadBalancer: true });
    node = await startFakeNodeAgent({ ...opts, datapath });
    const api = node.agent.api();
    if (!api.services || !datapath.loadBalancer) throw new Error('serviceApiServer: the agent serves no services over a datapath with a load balancer');
    const serve = async (name: string, app: FastifyInstance) => {
      apps.push(app);
      const socket = join(dir, name);
      await listenOnSocket(app, socket);
      return socket;
    };
    const socket = await serve('api.sock', buildServer(api, { validateResponses: true }));
    const socketWithoutServices = await serve('nosvc.sock', buildServer({ ...api, services: undefined }, { validateResponses: true }));
    return { node, services: api.services, lb: datapath.loadBalancer, socket, socketWithoutServices, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
