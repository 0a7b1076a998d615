/**
 * `tendril observe`: the flow history with Hubble's habits — the last N
 * flows (20 unless a time window or --last says otherwise), then with
 * --follow every new one; filters on either side (--pod, --namespace,
 * --label, --identity, --ip, --port, --service), on one side (--from-…,
 * --to-…), and on the flow (--verdict, --protocol, --type, --node, --since,
 * --until). Against the local agent's socket, or with --server against a
 * relay or one node's flows address: the same flows either way.
 */
import { readFileSync } from 'node:fs';
import { type Command, Option } from 'commander';
import { AgentResponseError } from '../client/agentClient.js';
import { type NdjsonStreamOptions, queryString, streamNdjson } from '../client/ndjsonStream.js';
import { FLOW_TABLE_HEADER, type FlowLine, flowFilterParams, FlowFilterError, flowTableRow, formatFlowLine, PEER_FILTER_PARAMS, parseFlowFilter } from '../flow/index.js';
import { type AgentOpts, call, client, table } from './agentCli.js';
import { CliError } from './cliError.js';

const OUTPUTS = ['compact', 'table', 'json'] as const;

export interface ObserveOpts extends AgentOpts {
  last?: string;
  follow?: boolean;
  server?: string;
  tokenFile?: string;
  tlsCa?: string;
  color?: boolean;
  [filter: string]: unknown;
}

const PEER_FILTER_TEXT: Record<(typeof PEER_FILTER_PARAMS)[number], string> = {
  pod: '[namespace/]pod-name-prefix',
  namespace: 'namespace',
  label: '[source:]key[=value]',
  identity: 'security identity',
  ip: 'IP address or CIDR',
  port: 'L4 port',
  service: '[namespace/]service',
};

const repeatable = (v: string, prev: string[] = []) => [...prev, v];

/** camelCase option key → the filter parameter (`fromPod` → `from-pod`). */
function paramOf(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

/** The filter parameters and `last`/`follow` for GET /v1/flows, checked before anything is sent. */
export function observeQuery(opts: ObserveOpts): Array<[string, string]> {
  if (opts.output !== undefined && !(OUTPUTS as readonly string[]).includes(opts.output)) throw new CliError(`unknown output format "${opts.output}" (use ${OUTPUTS.join(', ')})`);
  const params: Record<string, string[]> = {};
  for (const [k, v] of Object.entries(opts)) {
    const p = paramOf(k);
    if (Array.isArray(v) && v.length > 0) params[p] = v.map(String);
  }
  try {
    parseFlowFilter(params);
  } catch (err) {
    if (err instanceof FlowFilterError) throw new CliError(err.message);
    throw err;
  }
  const out = flowFilterParams(params);
  let last: number | undefined;
  if (opts.last !== undefined) {
    if (!/^\d+$/.test(opts.last) || Number(opts.last) > 1_000_000) throw new CliError(`--last must be a number from 0 to 1000000, got "${opts.last}"`);
    last = Number(opts.last);
  } else if (params.since === undefined && params.until === undefined) {
    last = 20;
  }
  if (last !== undefined) out.push(['last', String(last)]);
  if (opts.follow) out.push(['follow', 'true']);
  return out;
}

/** Prints each line as -o asks; a table waits for the whole answer (it has no meaning while following). */
export class FlowPrinter {
  readonly #rows: string[][] = [FLOW_TABLE_HEADER];
  readonly #nodes = new Set<string>();

  constructor(
    private readonly output: string,
    private readonly color: boolean,
    private readonly write: (text: string) => void,
    private readonly warn: (text: string) => void,
    /** Name each flow's node from the first line (a relay's answer), not only once a second node shows up. */
    private readonly showNodes = false,
  ) {}

  line(l: FlowLine): void {
    if ('flow' in l) {
      this.#nodes.add(l.flow.node);
      if (this.output === 'json') this.write(`${JSON.stringify(l.flow)}\n`);
      else if (this.output === 'table') this.#rows.push(flowTableRow(l.flow));
      else this.write(`${formatFlowLine(l.flow, { color: this.color, showNode: this.showNodes || this.#nodes.size > 1 })}\n`);
    } else if ('nodeStatus' in l) {
      if (l.nodeStatus.state !== 'ok') this.warn(`node ${l.nodeStatus.node} is unavailable: ${l.nodeStatus.message ?? 'no reason given'}\n`);
    } else {
      this.warn(`${l.lost.count} flows of node ${l.lost.node} lost: ${l.lost.reason}\n`);
    }
  }

  end(): void {
    if (this.output === 'table') this.write(table(this.#rows));
  }
}

function serverTarget(opts: ObserveOpts): { url: URL; token?: string; ca?: Buffer } {
  let url: URL;
  try {
    url = new URL(opts.server!);
  } catch {
    throw new CliError(`--server must be a URL such as https://relay:4245, got "${opts.server}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new CliError(`--server must be http:// or https://, got "${opts.server}"`);
  const read = (flag: string, path: string): Buffer => {
    try {
      return readFileSync(path);
    } catch (err) {
      throw new CliError(`${flag}: cannot read ${path}: ${(err as Error).message}`);
    }
  };
  const token = opts.tokenFile !== undefined ? read('--token-file', opts.tokenFile).toString('utf8').trim() : undefined;
  return { url, ...(token !== undefined ? { token } : {}), ...(opts.tlsCa !== undefined ? { ca: read('--tls-ca', opts.tlsCa) } : {}) };
}

function fetchFlows(opts: ObserveOpts, params: Array<[string, string]>, onLine: (l: FlowLine) => void, stream: NdjsonStreamOptions): Promise<void> {
  if (opts.server === undefined) return call(() => client(opts).listFlows(params, onLine, stream));
  const target = serverTarget(opts);
  return streamNdjson(target, `/v1/flows${queryString(params)}`, onLine, stream, {
    status: (status, body, text) => new CliError(`${target.url.origin}: ${status}: ${body?.message ?? text.slice(0, 200)}`),
    connect: (err) => new CliError(`cannot reach ${target.url.origin}: ${err.message}`),
  }).catch((err: unknown) => {
    if (err instanceof AgentResponseError) throw new CliError(err.message);
    throw err;
  });
}

export function registerObserveCommand(program: Command): void {
  const cmd = program
    .command('observe')
    .description('flows from the history (the last 20 unless --last, --since or --until say otherwise), and with --follow every new one')
    .option('--socket <path>', 'agent API socket (default $TENDRIL_SOCKET or /var/run/tendril/tendril.sock)')
    .addOption(new Option('-o, --output <format>', 'compact (default), table or json (one flow per line)').choices([...OUTPUTS]))
    .option('--last <n>', 'the newest n flows that pass the filters')
    .option('-f, --follow', 'go on with new flows until Ctrl-C')
    .option('--since <time>', 'flows since an ISO 8601 time or a duration back from now (30s, 10m, 2h)')
    .option('--until <time>', 'flows until an ISO 8601 time or a duration back from now')
    .option('--server <url>', 'a relay or a node\'s flows address (https://host:port) instead of the local agent')
    .option('--token-file <path>', 'the bearer token the --server wants')
    .option('--tls-ca <path>', 'the CA certificate the --server\'s is checked against')
    .option('--no-color', 'no colors, even on a terminal');
  for (const name of PEER_FILTER_PARAMS) {
    const what = PEER_FILTER_TEXT[name];
    cmd.option(`--${name} <${name}>`, `flows with this ${what} on either side (repeatable)`, repeatable);
    cmd.option(`--from-${name} <${name}>`, `flows from this ${what}`, repeatable);
    cmd.option(`--to-${name} <${name}>`, `flows to this ${what}`, repeatable);
  }
  cmd
    .option('--verdict <verdict>', 'forwarded, dropped, audit, would-drop or would-allow (repeatable)', repeatable)
    .option('--protocol <protocol>', 'tcp, udp, icmp, icmpv6 or sctp (repeatable)', repeatable)
    .option('-t, --type <type>', 'drop, policy-verdict or trace (repeatable)', repeatable)
    .option('--node <name>', 'flows seen by this node (repeatable; with a relay)', repeatable)
    .action(async (opts: ObserveOpts) => {
      // --since/--until are single values; the filter takes lists.
      const withLists: ObserveOpts = { ...opts, ...(opts.since !== undefined ? { since: [opts.since] } : {}), ...(opts.until !== undefined ? { until: [opts.until] } : {}) };
      const params = observeQuery(withLists);
      const output = opts.output ?? 'compact';
      const color = opts.color !== false && output === 'compact' && process.stdout.isTTY === true && process.env.NO_COLOR === undefined;
      const printer = new FlowPrinter(output, color, (t) => process.stdout.write(t), (t) => process.stderr.write(t), opts.server !== undefined);
      const abort = new AbortController();
      const stop = (): void => abort.abort();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      try {
        await fetchFlows(opts, params, (l) => printer.line(l), { signal: abort.signal });
      } finally {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
      }
      printer.end();
      if (opts.follow && !abort.signal.aborted) throw new CliError('the server ended the flow stream (it is stopping?)');
    });
}
