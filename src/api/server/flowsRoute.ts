/**
 * GET /v1/flows: the agent's flow history, filtered, as NDJSON FlowLines
 * (NdjsonStream) — the newest `last` first-to-last, then with `follow` every
 * flow recorded from then on until the client leaves (between the two, a
 * `nodeStatus` line naming the node ends the history part). A client too slow for
 * the flows it follows misses some: each gap is told in a `lost` line once
 * the client catches up, never hidden.
 */
import type { FastifyInstance } from 'fastify';
import { AgentError } from '../errors.js';
import type { Flow, FlowFilter } from '../../flow/index.js';
import { FlowFilterError, matchesFlow, parseFlowFilter } from '../../flow/index.js';
import type { Logger } from '../../logging/logger.js';
import { NdjsonStream } from './ndjsonStream.js';

/** What the route needs: the agent's flow history (a FlowRing). */
export interface FlowsApi {
  /** The node whose flows these are: a followed answer says when its history part ends, naming it. */
  readonly node?: string;
  list(accept: (f: Flow) => boolean, last?: number): Flow[];
  listen(listener: (f: Flow) => void): () => void;
}

export const NO_FLOWS = 'no flow history on this node: the eBPF datapath is not running here, or the agent runs with --flow-history-size 0';

/** The query parameters that are no filter. */
const NOT_FILTER = new Set(['last', 'follow']);

/** The filter parameters of a GET /v1/flows query (all but `last` and `follow`), as strings. */
export function flowFilterParamsOfQuery(query: Record<string, unknown>): Record<string, string | string[]> {
  const params: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(query)) {
    if (NOT_FILTER.has(k) || v === undefined) continue;
    params[k] = Array.isArray(v) ? v.map(String) : String(v);
  }
  return params;
}

/** The filter of a GET /v1/flows query; a bad one is a 400 naming it. */
export function flowFilterOfQuery(query: Record<string, unknown>): FlowFilter {
  try {
    return parseFlowFilter(flowFilterParamsOfQuery(query));
  } catch (err) {
    if (err instanceof FlowFilterError) throw new AgentError('INVALID_REQUEST', err.message, '', undefined, { cause: err });
    throw err;
  }
}

export function registerFlowsRoute(app: FastifyInstance, flows: FlowsApi | undefined, log: Logger): void {
  const open = new Set<() => void>();
  app.addHook('preClose', async () => {
    for (const end of [...open]) end();
  });

  app.get('/v1/flows', async (req, reply) => {
    if (!flows) throw new AgentError('CONFLICT', NO_FLOWS);
    const query = req.query as Record<string, unknown> & { last?: number; follow?: boolean };
    const filter = flowFilterOfQuery(query);
    const accept = (f: Flow): boolean => matchesFlow(f, filter);
    // Set once following: `end` may run before (the client left during the history).
    const following: { stop?: () => void } = {};
    let lost = 0;
    const end = (): void => {
      open.delete(end);
      following.stop?.();
      if (stream.skipped + lost > 0) log.warn({ skipped: stream.skipped + lost }, 'flows client too slow: flows skipped');
      stream.end();
    };
    const stream = new NdjsonStream(reply, end);
    open.add(end);
    const history = flows.list(accept, query.last);
    for (const f of history) stream.write({ flow: f });
    if (!query.follow) {
      end();
      return;
    }
    if (stream.ended) return;
    // The history part ends here; what follows is new. A relay merges the nodes' histories before it follows.
    if (flows.node !== undefined) stream.write({ nodeStatus: { node: flows.node, state: 'ok', flows: history.length } });
    following.stop = flows.listen((f) => {
      if (!accept(f)) return;
      if (stream.behind) {
        lost++;
        return;
      }
      if (lost > 0) {
        stream.write({ lost: { node: f.node, count: lost, reason: 'the client did not keep up' } });
        lost = 0;
      }
      stream.write({ flow: f });
    });
  });
}
