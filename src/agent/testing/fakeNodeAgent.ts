import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FakeDatapath } from '../../datapath/fake/fakeDatapath.js';
import { createLogger } from '../../logging/logger.js';
import { Agent } from '../agent.js';
import { type AgentConfig, defaultConfig, validateConfig } from '../config.js';

export interface FakeNodeAgent {
  agent: Agent;
  config: AgentConfig;
  datapath: FakeDatapath;
  /** Stops the agent and removes its directories. */
  stop(): Promise<void>;
}

/**
 * A real agent (embedded kvstore in a temp dir, its API on a socket there)
 * over the fake datapath: the agent's logic and API without root.
 */
export async function startFakeNodeAgent(opts: { nodeName: string; podCidr: string }): Promise<FakeNodeAgent> {
  const dir = await mkdtemp(join(tmpdir(), `${opts.nodeName}-`));
  const datapath = new FakeDatapath({ nodeLinks: ['eth0'] });
  const config = validateConfig({
    ...defaultConfig(),
    nodeName: opts.nodeName,
    stateDir: join(dir, 'state'),
    libDir: join(dir, 'lib'),
    socket: join(dir, 'state', 'tendril.sock'),
    kvstoreOpts: { 'embedded.synchronous': 'normal' },
    podCidrs: [opts.podCidr],
  });
  let agent: Agent;
  try {
    agent = await Agent.start(config, createLogger(opts.nodeName, process.env.TENDRIL_LOG_LEVEL ?? 'silent'), { datapath });
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    agent,
    config,
    datapath,
    stop: async () => {
      try {
        await agent.stop();
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
  };
}
