import { type DestinationStream, type Logger, pino } from 'pino';
import type { AgentConfig } from './config.js';

/**
 * The agent's logger. Every record carries the agent's own node as
 * `nodeName`: `node` is left to the records about some node (a remote one,
 * the Node object), so no record holds a key twice.
 */
export function agentLogger(config: Pick<AgentConfig, 'logLevel' | 'nodeName' | 'logFile'>, destination?: DestinationStream): Logger {
  return pino(
    { name: 'tendril-agent', level: config.logLevel, base: { pid: process.pid, nodeName: config.nodeName } },
    // The log names pods, addresses and the kvstore's endpoints: root-only, as the socket.
    destination ?? pino.destination(config.logFile ? { dest: config.logFile, mkdir: true, sync: false, mode: 0o600 } : 2),
  );
}
