/**
 * `tendril relay`: the cluster's flows in one place (Hubble Relay's role).
 * It serves what a node's flows listener serves — GET /v1/flows with the
 * same filters, GET /v1/policy (forwarded to the first node that answers),
 * GET /healthz — over the flows of every node it knows (RelaySession), with
 * the same access options (TLS and/or a bearer token), plus GET /metrics
 * (its counters, Prometheus text).
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import { AgentError } from '../api/errors.js';
import { flowFilterOfQuery, flowFilterParamsOfQuery } from '../api/server/flowsRoute.js';
import { type ListenAccess, listenAt, listenServerFactory, requireBearerToken } from '../api/server/listenAccess.js';
import { NdjsonStream } from '../api/server/ndjsonStream.js';
import { createApiApp } from '../api/server/server.js';
import { getText, queryString } from '../client/ndjsonStream.js';
import { flowFilterParams } from '../flow/index.js';
import type { Logger } from '../logging/logger.js';
import type { ServeAddress } from '../metrics/metricsServer.js';
import type { PeerSource } from './peers.js';
import { newCounters, type PeerClientOptions, peerTarget, type RelayCounters, RelaySession } from './relaySession.js';

export interface RelayOptions {
  listen: ServeAddress;
  access: ListenAccess;
  peers: PeerSource;
  client: PeerClientOptions;
  log: Logger;
  /** More read-only routes on the relay's instance (a web UI). */
  extraRoutes?: (app: FastifyInstance) => void;
  /** Paths of the extra routes anyone may GET without the token (a web UI's page and assets, which hold no data). */
  publicPaths?: (path: string) => boolean;
  /** The flag named when the address cannot be bound. */
  listenFlag?: string;
}

export class Relay {
  readonly counters: RelayCounters = newCounters();
  readonly #sessions = new Set<RelaySession>();
  #app: FastifyInstance | undefined;
  #address: ServeAddress | undefined;

  private constructor(private readonly o: RelayOptions) {}

  /** Follows the peers, then listens; a failure stops what had started. */
  static async start(o: RelayOptions): Promise<Relay> {
    const relay = new Relay(o);
    await o.peers.start();
    try {
      relay.#app = relay.#build();
      relay.#address = await listenAt(relay.#app, o.listen, o.listenFlag ?? '--listen-addr');
    } catch (err) {
      await relay.#app?.close();
      await o.peers.stop();
      throw err;
    }
    o.log.info({ listen: relay.#address, peers: o.peers.list().map((p) => p.name) }, 'relay ready');
    return relay;
  }

  /** Where it listens, as bound (the port chosen for :0). */
  get address(): ServeAddress {
    return this.#address!;
  }

  async close(): Promise<void> {
    for (const s of [...this.#sessions]) s.end();
    await this.#app?.close();
    await this.o.peers.stop();
  }

  #build(): FastifyInstance {
    const { log, access } = this.o;
    // The relay's /healthz and /metrics are its own, not the agent's bodies the document describes.
    const app = createApiApp({ log, serverFactory: listenServerFactory(access), validateResponses: false });
    if (access.token !== undefined) requireBearerToken(app, access.token, this.o.publicPaths);
    app.addHook('preClose', async () => {
      for (const s of [...this.#sessions]) s.end();
    });
    app.get('/v1/flows', async (req, reply) => this.#flows(req.query as Record<string, unknown>, reply));
    app.get('/v1/policy', async (req) => this.#policy(req.query as Record<string, string | string[] | undefined>));
    app.get('/v1/healthz', async () => this.health());
    app.get('/metrics', async (_req, reply) => {
      reply.type('text/plain; version=0.0.4; charset=utf-8');
      return this.metrics();
    });
    this.o.extraRoutes?.(app);
    return app;
  }

  async #flows(query: Record<string, unknown>, reply: FastifyReply): Promise<void> {
    const filter = flowFilterOfQuery(query);
    const filterOnly = flowFilterParamsOfQuery(query);
    this.counters.requests++;
    this.counters.clients++;
    // The stream may close (the client left) before the session exists.
    const held: { session?: RelaySession } = {};
    const stream = new NdjsonStream(reply, () => held.session?.end());
    const session = new RelaySession({
      stream,
      peers: this.o.peers,
      params: flowFilterParams(filterOnly),
      ...(filter.nodes ? { nodes: filter.nodes } : {}),
      ...(typeof query.last === 'number' ? { last: query.last } : {}),
      follow: query.follow === true,
      client: this.o.client,
      counters: this.counters,
      log: this.o.log,
    });
    held.session = session;
    if (stream.ended) session.end();
    this.#sessions.add(session);
    try {
      await session.run();
    } finally {
      this.#sessions.delete(session);
      this.counters.clients--;
    }
  }

  /** The first node that answers GET /v1/policy 200, in name order; 503 naming each node's failure when none does. */
  async #policy(query: Record<string, string | string[] | undefined>): Promise<unknown> {
    const params: Array<[string, string]> = [];
    for (const [k, v] of Object.entries(query)) for (const one of v === undefined ? [] : [v].flat()) params.push([k, one]);
    const why: string[] = [];
    for (const peer of this.o.peers.list().sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (peer.url === undefined) {
        why.push(`${peer.name}: ${peer.missing ?? 'no flows address'}`);
        continue;
      }
      try {
        const r = await getText(peerTarget(peer.url, this.o.client), `/v1/policy${queryString(params)}`);
        if (r.status === 200) return JSON.parse(r.text) as unknown;
        // The node's own answer to a bad query is the client's answer too.
        if (r.status === 400) throw new AgentError('INVALID_REQUEST', `${peer.name}: ${r.text.slice(0, 500)}`);
        why.push(`${peer.name}: ${r.status} ${r.text.slice(0, 200)}`);
      } catch (err) {
        if (err instanceof AgentError) throw err;
        why.push(`${peer.name}: ${(err as Error).message}`);
      }
    }
    throw new AgentError('TRY_AGAIN', `no node answered GET /v1/policy${why.length > 0 ? `: ${why.join('; ')}` : ' (the relay knows no node)'}`);
  }

  /** GET /healthz: the relay's nodes and counters (a relay with no node is still up: it says so). */
  health(): { status: 'ok'; nodes: Array<{ name: string; address?: string; missing?: string }>; counters: RelayCounters } {
    const nodes = this.o.peers.list().map((p) => ({ name: p.name, ...(p.url ? { address: p.url.origin } : {}), ...(p.missing ? { missing: p.missing } : {}) }));
    return { status: 'ok', nodes, counters: { ...this.counters } };
  }

  /** The counters as Prometheus text. */
  metrics(): string {
    const c = this.counters;
    const lines: Array<[string, string, 'counter' | 'gauge', number]> = [
      ['tendril_relay_clients', 'clients reading flows now', 'gauge', c.clients],
      ['tendril_relay_nodes', 'nodes the relay knows', 'gauge', this.o.peers.list().length],
      ['tendril_relay_requests_total', 'GET /v1/flows requests', 'counter', c.requests],
      ['tendril_relay_flows_received_total', 'flows received from the nodes', 'counter', c.flowsReceived],
      ['tendril_relay_flows_sent_total', 'flows sent to clients', 'counter', c.flowsSent],
      ['tendril_relay_flows_lost_total', 'flows a client was too slow for (told in lost lines)', 'counter', c.flowsLost],
      ['tendril_relay_node_flows_lost_total', 'flows the nodes reported lost toward the relay', 'counter', c.nodeFlowsLost],
      ['tendril_relay_node_failures_total', 'node answers that failed or never came', 'counter', c.peerFailures],
    ];
    return lines.map(([name, help, type, v]) => `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name} ${v}\n`).join('');
  }
}
