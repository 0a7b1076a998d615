import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { FakeDatapath } from '../../datapath/fake/fakeDatapath.js';
import { createLogger, type Logger } from '../../logging/logger.js';
import { Agent, type AgentDeps } from '../agent.js';
import { type AgentConfig, defaultConfig, validateConfig } from '../config.js';
import { NetnsNodeLock } from '../nodeLock.js';
import type { Underlay } from '../../datapath/linux/underlay.js';

export interface FakeNodeAgent<D extends FakeDatapath = FakeDatapath> {
  agent: Agent;
  config: AgentConfig;
  datapath: D;
  /** Stops the agent and removes its directories. */
  stop(): Promise<void>;
  /**
   * Stops the agent, leaves its directories and the fake datapath as they
   * are, runs `between` (a test damages the state there), and starts a new
   * agent on them. A failed start removes the directories and rethrows.
   */
  restart(between?: () => Promise<void>, opts?: { logger?: Logger }): Promise<FakeNodeAgent<D>>;
}

/**
 * A real agent (embedded kvstore in a temp dir, its API on a socket there)
 * over the fake datapath: the agent's logic and API without root.
 */
/** More of the fake node: config keys over the defaults (routingMode, mtu, leaseTtlSeconds, …), and the underlay it is told it has. */
export interface FakeNodeExtras {
  config?: Partial<AgentConfig>;
  /** Default none (the fake node has no underlay: the MTU is the mode's default, the node IP its router address). */
  underlay?: Underlay;
  /** Kubernetes knobs (the pod wait of an ADD, the watchers' back-off, the environment); the connection is config's k8sKubeconfig. */
  kubernetes?: AgentDeps['kubernetes'];
}

/** An etcd for the fake node's kvstore instead of the embedded store (several fake nodes on one etcd make a cluster). */
export interface FakeNodeKvstore {
  etcdEndpoint: string;
  /** More etcd options (`etcd.callTimeout`, …). */
  options?: Record<string, string>;
}

export async function startFakeNodeAgent(opts: { nodeName: string; podCidr: string; logger?: Logger; ipamExpirationMs?: number; kvstore?: FakeNodeKvstore; policyEndpointMaxEntries?: number } & FakeNodeExtras): Promise<FakeNodeAgent>;
/** The same over a datapath of the caller's (a FakeDatapath that records more, say). */
export async function startFakeNodeAgent<D extends FakeDatapath>(opts: { nodeName: string; podCidr: string; logger?: Logger; ipamExpirationMs?: number; kvstore?: FakeNodeKvstore; datapath: D } & FakeNodeExtras): Promise<FakeNodeAgent<D>>;
export async function startFakeNodeAgent(opts: { nodeName: string; podCidr: string; logger?: Logger; ipamExpirationMs?: number; kvstore?: FakeNodeKvstore; datapath?: FakeDatapath; policyEndpointMaxEntries?: number } & FakeNodeExtras): Promise<FakeNodeAgent> {
  const dir = await mkdtemp(join(tmpdir(), `${opts.nodeName}-`));
  const datapath = opts.datapath ?? new FakeDatapath({ nodeLinks: ['eth0'] });
  const config = validateConfig({
    ...defaultConfig(),
    nodeName: opts.nodeName,
    stateDir: join(dir, 'state'),
    libDir: join(dir, 'lib'),
    socket: join(dir, 'state', 'tendril.sock'),
    ...(opts.kvstore ? { kvstore: 'etcd' as const, kvstoreOpts: { ...opts.kvstore.options, 'etcd.endpoints': opts.kvstore.etcdEndpoint } } : { kvstoreOpts: { 'embedded.synchronous': 'normal' } }),
    podCidrs: [opts.podCidr],
    ...(opts.ipamExpirationMs !== undefined ? { ipamExpirationMs: opts.ipamExpirationMs } : {}),
    ...(opts.policyEndpointMaxEntries !== undefined ? { policyEndpointMaxEntries: opts.policyEndpointMaxEntries } : {}),
    ...opts.config,
  });
  return startOn(dir, config, datapath, opts.logger ?? createLogger(opts.nodeName, process.env.TENDRIL_LOG_LEVEL ?? 'silent'), opts.underlay, opts.kubernetes);
}

async function startOn<D extends FakeDatapath>(dir: string, config: AgentConfig, datapath: D, logger: Logger, underlay?: Underlay, kubernetes?: AgentDeps['kubernetes']): Promise<FakeNodeAgent<D>> {
  let agent: Agent;
  try {
    // Fake nodes share this process's network namespace: each gets a node lock name of its own.
    agent = await Agent.start(config, logger, {
      datapath,
      nodeLock: new NetnsNodeLock({ name: `tendril-agent-fake-${basename(dir)}` }),
      ...(underlay ? { underlay } : {}),
      ...(kubernetes ? { kubernetes } : {}),
    });
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
    restart: async (between, opts = {}) => {
      await agent.stop();
      await between?.();
      return startOn(dir, config, datapath, opts.logger ?? logger, underlay, kubernetes);
    },
  };
}
