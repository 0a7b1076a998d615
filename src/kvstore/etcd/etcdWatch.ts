import type { Etcd3, IKeyValue, IWatchResponse, Watcher } from 'etcd3';
import { CompactedError, KvstoreError } from '../errors.js';
import type { Logger } from '../../logging/logger.js';
import type { Watch, WatchEvent, WatchListener } from '../types.js';
import { mapEtcdError } from './etcdErrors.js';

function toEvent(type: 'put' | 'delete', kv: IKeyValue): WatchEvent {
  return {
    type,
    key: kv.key.toString('utf8'),
    value: type === 'put' ? kv.value.toString('utf8') : '',
    modRevision: Number(kv.mod_revision),
    createRevision: Number(kv.create_revision),
    version: Number(kv.version),
    lease: type === 'put' ? kv.lease : '0',
  };
}

/**
 * A prefix watch on etcd that survives disconnects without losing or repeating
 * events.
 *
 * etcd3's WatchManager reconnects by itself, but it resumes from "header
 * revision + 1" of the last response, and a catch-up response's header carries
 * the store's current revision rather than that of its events; a disconnect in
 * the middle of a catch-up would then skip history. So this class keeps its own
 * resume point — the revision after the last event it delivered — and writes
 * it into the watch request each time the stream drops, before etcd3
 * re-creates the watch. Events below the resume point are dropped as a second
 * guard against repeats.
 */
export class EtcdWatch implements Watch {
  readonly ready: Promise<void>;
  private next: number;
  private readonly watcher: Watcher;
  private closed = false;

  private readonly probeKey: Buffer;

  constructor(
    private readonly client: Etcd3,
    prefix: string,
    rangeEnd: string | undefined,
    fromRevision: number | undefined,
    private readonly listener: WatchListener,
    private readonly endpoints: string[],
    private readonly logger: Logger,
    /** Called once when the watch ends for good, so the backend can forget it. */
    private readonly onDone: () => void,
  ) {
    this.next = fromRevision ?? 0;
    this.probeKey = Buffer.from(prefix === '' ? '\0' : prefix, 'utf8');
    let builder = client.watch();
    // An empty prefix means every key: etcd spells that range ["\0", "\0").
    builder = prefix === '' ? builder.inRange({ start: Buffer.from([0]), end: Buffer.from([0]) }) : builder.inRange({ start: prefix, end: rangeEnd ?? Buffer.from([0]) });
    if (fromRevision !== undefined) builder = builder.startRevision(String(fromRevision));
    this.watcher = builder.watcher();
    this.watcher.on('connected', (res: IWatchResponse) => this.onConnected(res));
    this.watcher.on('data', (res: IWatchResponse) => this.onData(res));
    this.watcher.on('disconnected', (err: Error) => this.onDisconnected(err));
    this.watcher.on('error', (err: Error) => this.onError(err));
    this.ready = new Promise((resolve, reject) => {
      this.watcher.once('connected', () => resolve());
      this.watcher.once('error', (err: Error) => reject(this.mapError(err)));
    });
    // The rejection is also reported through listener.onError; a caller that
    // never awaits `ready` must not get an unhandled rejection for it.
    this.ready.catch(() => undefined);
  }

  get nextRevision(): number {
    return this.next;
  }

  private onConnected(res: IWatchResponse): void {
    // Without a start revision etcd watches from "now": the creation header.
    if (this.next === 0) this.next = Number(res.header.revision) + 1;
    this.logger.debug({ next: this.next }, 'kvstore etcd watch connected');
  }

  private onData(res: IWatchResponse): void {
    if (this.closed) return;
    const events = res.events
      .map((e) => toEvent(e.type === 'Put' ? 'put' : 'delete', e.kv))
      .filter((e) => e.modRevision >= this.next);
    if (events.length === 0) return;
    this.next = (events[events.length - 1] as WatchEvent).modRevision + 1;
    this.listener.onEvents(events);
  }

  private onDisconnected(err: Error): void {
    // Runs synchronously inside etcd3's error handler, before its reconnect timer,
    // so the re-created watch asks for exactly the first event not yet delivered.
    if (this.next > 0) this.watcher.request.start_revision = String(this.next);
    this.logger.warn({ err: err.message, resumeFrom: this.next }, 'kvstore etcd watch disconnected; will resume');
  }

  private mapError(err: Error): Error {
    const mapped = mapEtcdError(err, { endpoints: this.endpoints, revision: this.next });
    if (mapped instanceof CompactedError) return new CompactedError(this.next, 0);
    return mapped;
  }

  private onError(err: Error): void {
    if (this.closed) return;
    this.closed = true;
    const mapped = this.mapError(err);
    if (mapped instanceof KvstoreError || !err.message.startsWith('Watcher canceled')) {
      this.report(mapped);
      return;
    }
    // etcd 3.4 cancels a watch on compacted history with an empty cancel_reason
    // and only a compact_revision field, which etcd3 does not pass on. Ask etcd
    // directly: a read at our resume revision fails the same way iff it is compacted.
    this.client.kv
      .range({ key: this.probeKey, revision: String(this.next), limit: 1 })
      .then(
        () => this.report(mapped),
        (probeErr: unknown) => {
          const probe = mapEtcdError(probeErr, { endpoints: this.endpoints, revision: this.next });
          this.report(probe instanceof CompactedError ? new CompactedError(this.next, 0) : mapped);
        },
      );
  }

  private report(err: Error): void {
    this.onDone();
    if (!(err instanceof KvstoreError)) this.logger.error({ err }, 'kvstore etcd watch failed');
    this.listener.onError(err);
  }

  /**
   * Cancels the watch. etcd3 waits for etcd to confirm the cancel; a server
   * that stopped answering must not hang the caller, so the wait is bounded
   * (closing the client afterwards tears the stream down anyway).
   */
  async close(timeoutMs = 2000): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.onDone();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), timeoutMs);
    });
    const outcome = await Promise.race([this.watcher.cancel().then(() => 'cancelled' as const), timedOut]);
    clearTimeout(timer);
    if (outcome === 'timeout') this.logger.warn('kvstore etcd watch cancel not confirmed in time; dropping it');
  }
}
