import { formatFlowLine } from '../../src/flow/index.js';
import type { DatapathNode } from './datapathNode.js';
import { traceDport, traceVerdict } from './datapathNode.js';
import type { IpFamily } from './family.js';
import { describeProbe, inParallel, type NetnsProber, type ProbeOutcome, type Protocol, reachable } from './reachability.js';

/** Something that sends or answers probes: a pod, the node, an address of an outside host. */
export interface Peer {
  name: string;
  /** The labels `policy trace` gets for it (a pod's endpoint labels, reserved:host, a CIDR identity's). */
  labels: string[];
  /** The address others probe it at, and the one it sends from. */
  address: string;
  prober: NetnsProber;
  /** Bind probes it sends to `address` (a namespace with several addresses, the node). */
  bindSource: boolean;
  /** The IP version of `address`: a pair of peers is probed on one version. */
  version: IpFamily;
}

export interface L4Probe {
  proto: Protocol;
  port?: number;
}

export interface TruthRow {
  src: string;
  dst: string;
  probe: string;
  trace: 'allow' | 'deny';
  /** The IP version the flow ran on. */
  version: IpFamily;
  srcAddress: string;
  dstAddress: string;
  outcome: ProbeOutcome;
  detail?: string;
  /** The first probe timed out although the trace allows the flow; a later one with a long timeout decided. */
  retried?: boolean;
}

/** How many allowed flows that timed out a table probes again (see truthTable). */
export const DEFAULT_RETRY_LIMIT = 200;

/**
 * Probes every (src, dst, probe) and asks the policy engine's trace for the
 * same flow. Probes run `probeConcurrency` at a time (an expected drop costs
 * its whole timeout, so they overlap); trace answers are cached per label
 * sets and port, since pods of a namespace share none of their labels.
 */
export async function truthTable(
  node: DatapathNode,
  pairs: ReadonlyArray<[Peer, Peer]>,
  probes: readonly L4Probe[],
  opts: { timeoutMs: number; probeConcurrency: number; retryTimeoutMs?: number; retryLimit?: number },
): Promise<TruthRow[]> {
  for (const [src, dst] of pairs) if (src.version !== dst.version) throw new Error(`${src.name} (IPv${src.version}) -> ${dst.name} (IPv${dst.version}): a pair is probed on one IP version`);
  const flows = pairs.flatMap(([src, dst]) => probes.map((p) => ({ src, dst, p })));
  const traceCache = new Map<string, Promise<'allow' | 'deny'>>();
  const trace = (src: Peer, dst: Peer, p: L4Probe) => {
    const dport = traceDport(p);
    const key = `${src.labels.join(',')}|${dst.labels.join(',')}|${dport}`;
    let v = traceCache.get(key);
    if (v === undefined) traceCache.set(key, (v = traceVerdict(node, src.labels, dst.labels, dport)));
    return v;
  };
  const verdicts = await inParallel(flows, 8, ({ src, dst, p }) => trace(src, dst, p));
  const results = await inParallel(flows, opts.probeConcurrency, ({ src, dst, p }) =>
    src.prober.probe({ proto: p.proto, dst: dst.address, timeoutMs: opts.timeoutMs, ...(p.port !== undefined ? { port: p.port } : {}), ...(src.bindSource ? { src: src.address } : {}) }),
  );
  // A flow the trace allows that timed out is probed again with a long timeout: on a loaded
  // machine a stall of the probe agents can outlast the short one, and an allowed flow answers
  // in milliseconds when it runs. A real drop times out again; an unexpected answer is never retried.
  // More than `retryLimit` such flows is no stall but a path that drops (an IP version the
  // datapath does not carry): only the first ones are retried, so the table fails in seconds,
  // not in minutes of long timeouts.
  const timedOut = flows.map((f, i) => i).filter((i) => verdicts[i] === 'allow' && results[i]!.outcome === 'timeout');
  const retry = timedOut.slice(0, opts.retryLimit ?? DEFAULT_RETRY_LIMIT);
  const retried = new Set(retry);
  for (let attempt = 0; attempt < 2 && retry.length > 0; attempt++) {
    const again = await inParallel(retry, 32, (i) => {
      const { src, dst, p } = flows[i]!;
      return src.prober.probe({ proto: p.proto, dst: dst.address, timeoutMs: opts.retryTimeoutMs ?? 2000, ...(p.port !== undefined ? { port: p.port } : {}), ...(src.bindSource ? { src: src.address } : {}) });
    });
    retry.forEach((i, j) => (results[i] = again[j]!));
    retry.splice(0, retry.length, ...retry.filter((i) => results[i]!.outcome === 'timeout'));
  }
  return flows.map(({ src, dst, p }, i) => ({
    src: src.name,
    dst: dst.name,
    probe: describeProbe(p),
    trace: verdicts[i]!,
    version: src.version,
    srcAddress: src.address,
    dstAddress: dst.address,
    outcome: results[i]!.outcome,
    ...(results[i]!.detail ? { detail: results[i]!.detail } : {}),
    ...(retried.has(i) ? { retried: true } : {}),
  }));
}

function differs(r: TruthRow): boolean {
  return r.outcome === 'error' || reachable(r.outcome) !== (r.trace === 'allow');
}

/**
 * What the node's flow history holds between the peers of each row that
 * differs (both ways, the last few): a failed table then says what the
 * datapath did with the probes, not only that they timed out.
 */
export async function flowsBehindMismatches(node: DatapathNode, rows: readonly TruthRow[], limit = 6): Promise<string> {
  const out: string[] = [];
  for (const r of rows.filter(differs).slice(0, limit)) {
    const lines: string[] = [];
    const params: Array<[string, string]> = [['from-ip', r.srcAddress], ['from-ip', r.dstAddress], ['to-ip', r.srcAddress], ['to-ip', r.dstAddress], ['last', '12']];
    try {
      await node.agent.client.listFlows(params, (l) => {
        if ('flow' in l) lines.push(formatFlowLine(l.flow));
      });
    } catch (err) {
      lines.push(`(the flow history did not answer: ${(err as Error).message})`);
    }
    out.push(`flows between ${r.src} (${r.srcAddress}) and ${r.dst} (${r.dstAddress}):\n${lines.length > 0 ? lines.map((l) => `  ${l}`).join('\n') : '  (none recorded)'}`);
  }
  return out.join('\n');
}

/** Rows where what the packets did differs from the trace, as readable lines. */
export function mismatches(rows: readonly TruthRow[]): string[] {
  return rows
    .filter(differs)
    .map((r) => `${r.src} -> ${r.dst} ${r.probe}${versionNote(r)}: trace ${r.trace.toUpperCase()}, packets ${r.outcome}${r.detail ? ` (${r.detail})` : ''}`);
}

/** ` over IPv6` on an IPv6 row, nothing on IPv4 (the texts IPv4 runs always printed). */
export function versionNote(r: { version: IpFamily }): string {
  return r.version === 6 ? ' over IPv6' : '';
}

/**
 * The outcome of one flow of a table, for hand-written expectations; a
 * table of several IP versions needs the version (each holds the flow).
 */
export function rowOf(rows: readonly TruthRow[], src: string, dst: string, probe: string, version?: IpFamily): TruthRow {
  const found = rows.filter((x) => x.src === src && x.dst === dst && x.probe === probe && (version === undefined || x.version === version));
  if (found.length === 0) throw new Error(`no row ${src} -> ${dst} ${probe}${version ? ` on IPv${version}` : ''} in the truth table`);
  if (found.length > 1) throw new Error(`${found.length} rows ${src} -> ${dst} ${probe}: name the IP version`);
  return found[0]!;
}
