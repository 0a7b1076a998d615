/**
 * For tests of the datapath's API and CLI: a fake-node agent (policy imported:
 * db admits web) whose API also serves the monitor and /v1/bpf/* over test
 * maps pinned in a temp bpffs directory, on a socket of its own. Needs root
 * (bpffs). `stop` removes everything it made.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { createTestDatapathMaps, type TestDatapathMaps } from '../../datapath/bpf/testing/inspectMaps.js';
import { dbFromWebPolicy } from '../../policy/testing/policies.js';
import { type AgentApi, buildServer, listenOnSocket } from '../../api/server/server.js';
import { BpfObservability } from '../bpfObservability.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './fakeNodeAgent.js';

export interface BpfApiServer {
  maps: TestDatapathMaps;
  node: FakeNodeAgent;
  api: AgentApi;
  observability: BpfObservability;
  app: FastifyInstance;
  socket: string;
  stop(): Promise<void>;
}

export async function startBpfApiServer(opts: { nodeName: string; podCidr: string }): Promise<BpfApiServer> {
  const maps = await createTestDatapathMaps();
  const dir = await mkdtemp(join(tmpdir(), `${opts.nodeName}-`));
  let node: FakeNodeAgent | undefined;
  let observability: BpfObservability | undefined;
  let app: FastifyInstance | undefined;
  const stop = async () => {
    await app?.close();
    await observability?.stop();
    await node?.stop();
    await maps.remove();
    await rm(dir, { recursive: true, force: true });
  };
  try {
    node = await startFakeNodeAgent(opts);
    const api = node.agent.api();
    await api.policy.import(dbFromWebPolicy({ namespace: 'default' }));
    observability = new BpfObservability({
      pinDir: maps.pinDir,
      log: pino({ level: 'silent' }),
      identityLabels: (id) => api.identities.get(id)?.labels,
      policies: () => api.policy.list({}),
      policyRevision: () => api.policy.revision,
    });
    app = buildServer({ ...api, monitor: observability.monitor, bpf: observability.bpf }, { validateResponses: true });
    const socket = join(dir, 'api.sock');
    await listenOnSocket(app, socket);
    return { maps, node, api, observability, app, socket, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
