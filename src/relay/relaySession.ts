/**
 * One client's GET /v1/flows at the relay: the filter forwarded to every
 * node, the nodes' flows merged in time order (mergeHistories for the
 * history part, a ReorderWindow while following), every node that does not
 * answer reported as a `nodeStatus` line, and what the client was too slow
 * for counted in `lost` lines per node.
 *
 * History: each node answers its newest `last`; when all have answered (or
 * failed, or run past the deadline) the merge's newest `last` go out, then a
 * status line per node (`ok` with its flows in the answer, or `unavailable`
 * with why). Following: each node's answer has a history part ended by its
 * `nodeStatus` line (flowsRoute.ts), then new flows; the history parts are
 * merged as above, then new flows leave the reorder window in time order.
 * A node that fails while followed is reported and reconnected with back-off
 * (new flows only); nodes that join or leave the peer source are picked up.
 */
import { Backoff } from '../async/backoff.js';
import type { NdjsonStream } from '../api/server/ndjsonStream.js';
import { queryString, type StreamTarget, streamNdjson } from '../client/ndjsonStream.js';
import type { FlowLine, FlowNodeStatus } from '../flow/index.js';
import type { Logger } from '../logging/logger.js';
import { mergeHistories, ReorderWindow, type TimedLine } from './merge.js';
import type { PeerSource, RelayPeer } from './peers.js';

/** How the relay reaches the nodes' flows listeners. */
/** Flows per write to the client: ~700 KB, well under the queue a client may have (4 MiB) before it misses flows. */
const FLOW_BATCH = 1000;

export interface PeerClientOptions {
  token?: string;
  /** CA of the nodes' certificates. */
  ca?: Buffer;
  /** Client certificate for nodes that ask for one (mTLS). */
  cert?: Buffer;
  key?: Buffer;
  /** A node must accept the connection and answer the headers within this. */
  connectTimeoutMs: number;
  /** A node's whole history answer must arrive within this, or the node is reported unavailable. */
  historyTimeoutMs: number;
  /** How long a followed flow is held to be put in time order with the other nodes'. */
  reorderWindowMs: number;
  /** Back-off of the reconnects to a followed node that failed. */
  retry: { initialMs: number; maxMs: number };
}

/** What the relay counts over all its clients (GET /healthz, GET /metrics). */
export interface RelayCounters {
  clients: number;
  requests: number;
  /** Flow lines received from the nodes. */
  flowsReceived: number;
  /** Flow lines sent to clients. */
  flowsSent: number;
  /** Flows a client was too slow for (told in `lost` lines). */
  flowsLost: number;
  /** Flows the nodes said their clients (this relay) lost. */
  nodeFlowsLost: number;
  /** Node answers that failed or never came. */
  peerFailures: number;
}

export function newCounters(): RelayCounters {
  return { clients: 0, requests: 0, flowsReceived: 0, flowsSent: 0, flowsLost: 0, nodeFlowsLost: 0, peerFailures: 0 };
}

export function peerTarget(url: URL, o: PeerClientOptions): StreamTarget {
  return {
    url,
    timeoutMs: o.connectTimeoutMs,
    ...(o.token !== undefined ? { token: o.token } : {}),
    ...(o.ca !== undefined ? { ca: o.ca } : {}),
    ...(o.cert !== undefined && o.key !== undefined ? { cert: o.cert, key: o.key } : {}),
  };
}

class PeerFailure extends Error {}

const failures = {
  status: (status: number, body: { message?: string } | undefined, text: string) => new PeerFailure(`${status}: ${body?.message ?? text.slice(0, 200)}`),
  connect: (err: NodeJS.ErrnoException) => new PeerFailure(err.code !== undefined && err.message.includes(err.code) ? err.message : `${err.code ?? ''} ${err.message}`.trim()),
};

interface PeerState {
  peer: RelayPeer;
  abort: AbortController;
  /** In the history part of the node's answer (its lines collected for the merge). */
  inHistory: boolean;
  history: TimedLine[];
  /** Failed or ended: reported, waiting for its reconnect. */
  down: boolean;
  retry: Backoff;
  timer?: NodeJS.Timeout;
  /** Why it is unavailable, told when the history part goes out. */
  failure?: string | undefined;
  /** Still in its history part at the deadline: reported, its flows go through the window from then on. */
  late?: boolean;
}

export interface SessionOptions {
  stream: NdjsonStream;
  peers: PeerSource;
  /** The filter as query parameters, forwarded to every node. */
  params: Array<[string, string]>;
  /** Nodes the filter names (`node`): only those are asked. */
  nodes?: readonly string[];
  last?: number;
  follow: boolean;
  client: PeerClientOptions;
  counters: RelayCounters;
  log: Logger;
}

export class RelaySession {
  readonly #o: SessionOptions;
  readonly #states = new Map<string, PeerState>();
  readonly #window: ReorderWindow;
  /** Flows per node the client was too slow for, told when it catches up. */
  readonly #lost = new Map<string, number>();
  /** Flows per node sent in the history part. */
  readonly #sent = new Map<string, number>();
  #historyDone = false;
  #opening = false;
  #ended = false;
  #tick: NodeJS.Timeout | undefined;
  #deadline: NodeJS.Timeout | undefined;
  #unsubscribe: (() => void) | undefined;
  readonly #done: Promise<void>;
  #resolveDone!: () => void;

  constructor(o: SessionOptions) {
    this.#o = o;
    this.#window = new ReorderWindow(o.client.reorderWindowMs);
    this.#done = new Promise((resolve) => (this.#resolveDone = resolve));
  }

  /** Asks every node; resolves when a history answer is complete, or a followed one ends (end()). */
  run(): Promise<void> {
    if (this.#ended) return this.#done;
    // Not done before every node is asked: a node without an address fails at once.
    this.#opening = true;
    for (const peer of this.#wanted()) this.#open(peer, this.#o.last);
    this.#opening = false;
    this.#deadline = setTimeout(() => this.#historyDeadline(), this.#o.client.historyTimeoutMs);
    if (this.#o.follow) this.#unsubscribe = this.#o.peers.subscribe(() => this.#peersChanged());
    this.#maybeHistoryDone();
    return this.#done;
  }

  /** The client left or the relay stops: every node's request is aborted. */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    clearInterval(this.#tick);
    clearTimeout(this.#deadline);
    this.#unsubscribe?.();
    for (const s of this.#states.values()) {
      clearTimeout(s.timer);
      s.abort.abort();
    }
    this.#o.stream.end();
    this.#resolveDone();
  }

  #wanted(): RelayPeer[] {
    const nodes = this.#o.nodes;
    return this.#o.peers.list().filter((p) => nodes === undefined || nodes.includes(p.name));
  }

  #open(peer: RelayPeer, last: number | undefined): void {
    const prev = this.#states.get(peer.name);
    const state: PeerState = {
      peer,
      abort: new AbortController(),
      inHistory: true,
      history: [],
      down: false,
      retry: prev?.retry ?? new Backoff({ ...this.#o.client.retry, jitter: 'full' }),
      // Back before the history part went out: it was unavailable meanwhile, and says so then.
      ...(prev?.failure !== undefined && !this.#historyDone ? { failure: prev.failure } : {}),
    };
    this.#states.set(peer.name, state);
    if (peer.url === undefined) {
      this.#fail(state, peer.missing ?? 'no flows address');
      return;
    }
    const params: Array<[string, string]> = [...this.#o.params, ...(last !== undefined ? [['last', String(last)] as [string, string]] : []), ...(this.#o.follow ? [['follow', 'true'] as [string, string]] : [])];
    const target = peerTarget(peer.url, this.#o.client);
    streamNdjson<FlowLine>(target, `/v1/flows${queryString(params)}`, (line, text) => this.#line(state, line, text), { signal: state.abort.signal }, failures).then(
      () => {
        if (state.abort.signal.aborted) return;
        if (this.#o.follow) this.#fail(state, 'the node ended the stream (its agent stopped?)');
        else this.#historyEnded(state);
      },
      (err: unknown) => {
        if (state.abort.signal.aborted) return;
        this.#fail(state, err instanceof PeerFailure ? err.message : (err as Error).message);
      },
    );
  }

  #line(state: PeerState, line: FlowLine, text: string): void {
    if (this.#ended || this.#states.get(state.peer.name) !== state) return;
    if ('flow' in line) {
      this.#o.counters.flowsReceived++;
      const time = Date.parse(line.flow.event.time);
      // A time that does not parse sorts as the time it came.
      const t: TimedLine = { time: Number.isNaN(time) ? Date.now() : time, node: state.peer.name, text };
      if (state.inHistory) state.history.push(t);
      else this.#window.push(t, Date.now());
    } else if ('lost' in line) {
      this.#o.counters.nodeFlowsLost += line.lost.count;
      this.#writeNow(text);
    } else if ('nodeStatus' in line && state.inHistory && this.#o.follow) {
      // The end of the node's history part (flowsRoute.ts): from here its flows are new.
      this.#historyEnded(state);
    }
  }

  #historyEnded(state: PeerState): void {
    if (!state.inHistory) return;
    state.inHistory = false;
    state.retry.reset();
    if (this.#historyDone) {
      // A node that joined or came back: its flows go through the window.
      const now = Date.now();
      for (const t of state.history) this.#window.push(t, now);
      state.history = [];
      this.#status({ node: state.peer.name, state: 'ok' });
      return;
    }
    this.#maybeHistoryDone();
  }

  #fail(state: PeerState, message: string): void {
    if (this.#ended || state.down) return;
    state.down = true;
    state.abort.abort();
    this.#o.counters.peerFailures++;
    this.#o.log.debug({ node: state.peer.name, message }, 'relay: node did not answer');
    const kept = state.history;
    state.history = [];
    const wasInHistory = state.inHistory;
    state.inHistory = false;
    // Whatever it sent before failing is not hidden either.
    if (this.#historyDone) {
      const now = Date.now();
      for (const t of kept) this.#window.push(t, now);
      this.#status({ node: state.peer.name, state: 'unavailable', message });
    } else {
      state.history = kept;
      state.failure = message;
      if (wasInHistory) this.#maybeHistoryDone();
    }
    if (this.#o.follow && state.peer.url !== undefined) {
      state.timer = setTimeout(() => {
        if (this.#ended || this.#states.get(state.peer.name) !== state) return;
        this.#open(state.peer, 0);
      }, state.retry.next());
    }
  }

  #historyDeadline(): void {
    if (this.#historyDone) return;
    for (const s of this.#states.values()) {
      if (!s.inHistory || s.down) continue;
      // Reported now; following, what it sent and sends goes through the window from here (an agent too old to end its history part lands here too).
      s.failure = `its history did not end within ${this.#o.client.historyTimeoutMs} ms${this.#o.follow ? '; its flows follow as they come' : ''}`;
      s.late = true;
    }
    this.#finishHistory();
  }

  #maybeHistoryDone(): void {
    if (this.#historyDone || this.#opening) return;
    for (const s of this.#states.values()) if (s.inHistory && !s.down) return;
    this.#finishHistory();
  }

  #finishHistory(): void {
    if (this.#historyDone || this.#ended) return;
    this.#historyDone = true;
    clearTimeout(this.#deadline);
    const states = [...this.#states.values()];
    const answers = states.map((s) => (s.late ? [] : s.history));
    const merged = mergeHistories(answers, this.#o.last);
    for (const line of merged) this.#sent.set(line.node, (this.#sent.get(line.node) ?? 0) + 1);
    this.#writeFlows(merged);
    const now = Date.now();
    for (const s of states) {
      if (s.late) {
        s.inHistory = false;
        for (const t of s.history) this.#window.push(t, now);
      }
      s.history = [];
      s.late = false;
      if (s.failure !== undefined) this.#status({ node: s.peer.name, state: 'unavailable', message: s.failure });
      else this.#status({ node: s.peer.name, state: 'ok', flows: this.#sent.get(s.peer.name) ?? 0 });
      s.failure = undefined;
    }
    if (!this.#o.follow) {
      this.end();
      return;
    }
    const every = Math.max(10, Math.min(100, Math.floor(this.#o.client.reorderWindowMs / 4)));
    this.#tick = setInterval(() => this.#drain(), every);
  }

  #drain(): void {
    const due: TimedLine[] = [];
    this.#window.drain(Date.now(), (line) => due.push(line));
    this.#writeFlows(due);
  }

  #peersChanged(): void {
    if (this.#ended) return;
    const wanted = new Map(this.#wanted().map((p) => [p.name, p]));
    for (const [name, s] of [...this.#states]) {
      const now = wanted.get(name);
      if (now !== undefined && now.url?.href === s.peer.url?.href) continue;
      clearTimeout(s.timer);
      s.abort.abort();
      this.#states.delete(name);
      if (now === undefined && !s.down) this.#status({ node: name, state: 'unavailable', message: 'the node left the node registry' });
    }
    for (const [name, p] of wanted) {
      if (this.#states.has(name)) continue;
      // A node that joined (or moved): new flows from now on.
      this.#open(p, 0);
    }
  }

  #status(s: FlowNodeStatus): void {
    this.#writeNow(JSON.stringify({ nodeStatus: s }));
  }

  /** A status or a lost line: written unless the client is too far behind (then it is counted as skipped by the stream). */
  #writeNow(text: string): void {
    this.#tellLost();
    this.#o.stream.writeLine(text);
  }

  /** Flows in one write, in batches a client's queue can take; a batch it has no room for is counted per node, told once it catches up. */
  #writeFlows(lines: readonly TimedLine[]): void {
    const stream = this.#o.stream;
    for (let i = 0; i < lines.length && !stream.ended; i += FLOW_BATCH) {
      const batch = lines.slice(i, i + FLOW_BATCH);
      if (stream.behind) {
        this.#o.counters.flowsLost += batch.length;
        for (const line of batch) this.#lost.set(line.node, (this.#lost.get(line.node) ?? 0) + 1);
        continue;
      }
      this.#tellLost();
      if (stream.writeLines(batch.map((l) => l.text))) this.#o.counters.flowsSent += batch.length;
    }
  }

  #tellLost(): void {
    if (this.#lost.size === 0 || this.#o.stream.behind) return;
    for (const [node, count] of this.#lost) this.#o.stream.writeLine(JSON.stringify({ lost: { node, count, reason: 'the client did not keep up with the relay' } }));
    this.#lost.clear();
  }
}
