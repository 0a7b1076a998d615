import type { Command } from 'commander';
import { DEFAULT_SOCKET, SOCKET_ENV } from '../api/types.js';
import { AgentClient, AgentResponseError, AgentUnreachableError } from '../client/agentClient.js';
import { CliError } from './cliError.js';

/** What every command that talks to the local agent shares: socket choice, errors, output. */
export interface AgentOpts {
  socket?: string;
  output?: string;
}

export function client(opts: AgentOpts): AgentClient {
  const socketPath = opts.socket ?? process.env[SOCKET_ENV] ?? DEFAULT_SOCKET;
  if (!socketPath.startsWith('/')) throw new CliError(`--socket must be an absolute path, got "${socketPath}"`);
  return new AgentClient({ socketPath, timeoutMs: 30_000 });
}

export async function call<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof AgentUnreachableError) {
      // The socket is there but not ours to open: asking whether the agent runs would send the user the wrong way.
      if ((err.cause as NodeJS.ErrnoException).code === 'EACCES') throw new CliError(`permission denied on ${err.socketPath}: run as root`);
      throw new CliError(`${err.message} (is tendril-agent running? pick it with --socket or ${SOCKET_ENV})`);
    }
    if (err instanceof AgentResponseError) throw new CliError(`agent: ${err.body.code}: ${err.message}`);
    throw err;
  }
}

export function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd()).join('\n') + '\n';
}

export async function output(opts: AgentOpts, value: unknown, human: () => string): Promise<void> {
  if (opts.output === 'json') process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
  else if (opts.output === 'yaml') process.stdout.write((await import('./yamlOutput.js')).toYaml(value));
  else if (opts.output === undefined || opts.output === 'table') process.stdout.write(human());
  else throw new CliError(`unknown output format "${opts.output}" (use table, json or yaml)`);
}

export function withAgentOpts(c: Command): Command {
  return c.option('--socket <path>', `agent API socket (default $${SOCKET_ENV} or ${DEFAULT_SOCKET})`).option('-o, --output <format>', 'output format: table (default), json or yaml');
}

