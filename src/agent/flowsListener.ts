/**
 * The agent's side of --flows-listen-addr: the listener's access read from
 * its files, the listener started over the agent's flows, policies and
 * health, and the address the node's record announces for it.
 */
import { FLOW_UI_ROUTES } from '../flowui/index.js';
import { FlowsListener } from '../api/server/flowsListener.js';
import { hostPort, readListenAccess } from '../api/server/listenAccess.js';
import type { AgentApi } from '../api/server/server.js';
import type { Logger } from '../logging/logger.js';
import { parseServeAddress } from '../metrics/metricsServer.js';
import type { NodeFlowsAddress } from '../node/index.js';
import { type AgentConfig, FLOWS_LISTEN_FLAGS, flowsListenFiles } from './config.js';

export async function startFlowsListener(config: AgentConfig, api: AgentApi, log: Logger): Promise<FlowsListener> {
  const access = readListenAccess(flowsListenFiles(config), FLOWS_LISTEN_FLAGS);
  const where = parseServeAddress(config.flowsListenAddr!, FLOWS_LISTEN_FLAGS.listen);
  return FlowsListener.start(where, { flows: api.flows, policy: api.policy, health: api.health, log, access, ...FLOW_UI_ROUTES }, FLOWS_LISTEN_FLAGS.listen);
}

/** What the node's record says of the listener: its host, or the node IP for every address (`:port`, 0.0.0.0, ::). */
export function announcedFlowsAddress(listener: FlowsListener, nodeIp: string): NodeFlowsAddress {
  const { host, port } = listener.address;
  const unspecified = host === '' || host === '0.0.0.0' || host === '::';
  return { address: hostPort(unspecified && nodeIp !== '0.0.0.0' ? nodeIp : host === '' ? '0.0.0.0' : host, port), tls: listener.tls };
}
