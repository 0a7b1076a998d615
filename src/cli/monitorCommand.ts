import { type Command, Option } from 'commander';
import { formatEventLine, MONITOR_EVENT_TYPES, type MonitorEvent, type MonitorEventType } from '../monitor/index.js';
import { type AgentOpts, call, client, withAgentOpts } from './agentCli.js';
import { CliError } from './cliError.js';

export interface MonitorOpts extends AgentOpts {
  type?: string[];
  endpoint?: string;
  identity?: string;
}

const repeatable = (v: string, prev: string[] = []) => [...prev, v];

function integerOption(name: string, text: string | undefined, max: number): number | undefined {
  if (text === undefined) return undefined;
  if (!/^\d+$/.test(text) || Number(text) > max) throw new CliError(`--${name} must be a number from 0 to ${max}, got "${text}"`);
  return Number(text);
}

/** The query `tendril monitor` sends, from its options; refuses bad ones before calling the agent. */
export function monitorQuery(opts: MonitorOpts): { type?: MonitorEventType[]; endpoint?: number; identity?: number } {
  const types = opts.type ?? [];
  for (const t of types) {
    if (!(MONITOR_EVENT_TYPES as readonly string[]).includes(t)) throw new CliError(`--type must be one of ${MONITOR_EVENT_TYPES.join(', ')}, got "${t}"`);
  }
  if (opts.output !== undefined && opts.output !== 'json' && opts.output !== 'text') throw new CliError(`unknown output format "${opts.output}" (use json)`);
  const endpoint = integerOption('endpoint', opts.endpoint, 0xffff);
  const identity = integerOption('identity', opts.identity, 0xffffffff);
  return {
    ...(types.length > 0 ? { type: [...new Set(types)] as MonitorEventType[] } : {}),
    ...(endpoint !== undefined ? { endpoint } : {}),
    ...(identity !== undefined ? { identity } : {}),
  };
}

/** One event as `tendril monitor` prints it: a text line, or a JSON line with -o json. */
export function monitorLine(e: MonitorEvent, output: string | undefined): string {
  return output === 'json' ? `${JSON.stringify(e)}\n` : `${formatEventLine(e)}\n`;
}

/** `tendril monitor`: the datapath's events, live, until Ctrl-C. */
export function registerMonitorCommand(program: Command): void {
  withAgentOpts(program.command('monitor').description('stream datapath events (drops, policy verdicts, traces) until Ctrl-C'))
    .addOption(new Option('--type <type>', `only these event types (repeatable): ${MONITOR_EVENT_TYPES.join(', ')}`).argParser(repeatable))
    .option('--endpoint <id>', 'only events with this endpoint as source or destination')
    .option('--identity <id>', 'only events with this identity as source or destination')
    .action(async (opts: MonitorOpts) => {
      const query = monitorQuery(opts);
      const abort = new AbortController();
      const stop = (): void => abort.abort();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      try {
        if (opts.output !== 'json') process.stderr.write('Listening for events... Press Ctrl-C to quit\n');
        await call(() => client(opts).monitorEvents(query, (e) => process.stdout.write(monitorLine(e, opts.output)), { signal: abort.signal }));
      } finally {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
      }
      if (!abort.signal.aborted) throw new CliError('the agent ended the event stream (it is stopping?)');
    });
}
