import { type DestinationStream, type Logger, pino } from 'pino';
import { formattedDestination, ISO_TIME } from '../logging/logger.js';
import type { AgentConfig } from './config.js';

/**
 * The agent's logger. Every record carries the agent's own node as
 * `nodeName`: `node` is left to the records about some node (a remote one,
 * the Node object), so no record holds a key twice. `--log-format auto`
 * writes human lines to a terminal and JSON to a file or a pipe.
 */
export function agentLogger(config: Pick<AgentConfig, 'logLevel' | 'nodeName' | 'logFile' | 'logFormat'>, destination?: DestinationStream, toTerminal = config.logFile === undefined && process.stderr.isTTY === true): Logger {
  // The log names pods, addresses and the kvstore's endpoints: root-only, as the socket.
  const dest = destination ?? pino.destination(config.logFile ? { dest: config.logFile, mkdir: true, sync: false, mode: 0o600 } : 2);
  return pino({ name: 'tendril-agent', level: config.logLevel, base: { pid: process.pid, nodeName: config.nodeName }, timestamp: ISO_TIME }, formattedDestination(dest, config.logFormat, toTerminal));
}
