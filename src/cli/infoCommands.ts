import type { Command } from 'commander';
import { tendrilVersion } from '../version.js';
import { type AgentOpts, call, client, output, table, withAgentOpts } from './agentCli.js';
import { CliError } from './cliError.js';

/** `tendril version` and `tendril config`: what is running, and how it is configured. */

interface VersionReport {
  client: string;
  /** Absent when the agent could not be asked (--client, or unreachable: then `agentError` says why). */
  agent?: string;
  agentError?: string;
}

export function registerInfoCommands(program: Command): void {
  withAgentOpts(program.command('version').description('the client\'s version and the running agent\'s (GET /status)'))
    .option('--client', 'the client\'s version only; the agent is not asked')
    .action(async (opts: AgentOpts & { client?: boolean }) => {
      const report: VersionReport = { client: tendrilVersion() };
      if (!opts.client) {
        try {
          const status = await call(() => client(opts).status());
          report.agent = status.version ?? 'unknown (the agent does not say)';
        } catch (err) {
          if (!(err instanceof CliError)) throw err;
          report.agentError = err.message;
        }
      }
      await output(opts, report, () =>
        table([
          ['Client', report.client],
          ...(opts.client ? [] : [['Agent', report.agent ?? `unreachable: ${report.agentError}`]]),
        ]),
      );
      // As kubectl version: the client's version is printed either way, and a missing agent fails the command.
      if (report.agentError !== undefined) process.exitCode = 1;
    });

  withAgentOpts(program.command('config').description('the running agent\'s configuration (GET /config); keys as in its YAML config file')).action(async (opts: AgentOpts) => {
    const config = await call(() => client(opts).getConfig());
    await output(opts, config, () => table([['KEY', 'VALUE'], ...Object.entries(config).map(([k, v]) => [k, configValue(v)])]));
  });
}

/** One configuration value on one line: lists comma-separated, maps as k=v. */
function configValue(v: unknown): string {
  if (v === undefined || v === null) return '-';
  if (Array.isArray(v)) return v.length === 0 ? '-' : v.map(String).join(',');
  if (typeof v === 'object') {
    const entries = Object.entries(v as Record<string, unknown>);
    return entries.length === 0 ? '-' : entries.map(([k, x]) => `${k}=${String(x)}`).join(',');
  }
  return String(v);
}
