// One watch connection of the fake API server: JSON lines over a chunked
// HTTP response, as kube-apiserver streams them. It replays the history after
// the requested resourceVersion (or the current objects as ADDED when none was
// given), then follows live changes; selectors turn a change that makes an
// object start or stop matching into ADDED or DELETED, as the watch cache does.
import type { ServerResponse } from 'node:http';
import { apiVersionOf, type FakeResourceType } from './fakeKubeResources.js';
import type { ObjectMatcher } from './fakeKubeSelectors.js';
import { type FakeKubeStore, kubeStatus, type KubeObject, metaOf, type StoredEvent, typeKeyOf } from './fakeKubeStore.js';

export interface WatchRequest {
  type: FakeResourceType;
  version: string;
  /** Objects must match this (namespace of the path, label and field selectors). */
  matches: ObjectMatcher;
  /** The resourceVersion query parameter; undefined, '' and '0' mean "the current state first". */
  resourceVersion: number | undefined;
  bookmarkIntervalMs: number | undefined;
  timeoutSeconds: number | undefined;
}

export class FakeKubeWatch {
  private unsubscribe: (() => void) | undefined;
  private readonly timers: NodeJS.Timeout[] = [];
  private closed = false;

  constructor(
    private readonly store: FakeKubeStore,
    private readonly req: WatchRequest,
    readonly res: ServerResponse,
    private readonly onClose: (w: FakeKubeWatch) => void,
  ) {}

  /** Sends what the watch starts with and follows the store; synchronous, so no change slips between replay and subscription. */
  start(): void {
    const { type, resourceVersion, matches } = this.req;
    this.res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache, private', 'Transfer-Encoding': 'chunked' });
    this.res.flushHeaders();
    this.res.on('close', () => this.cleanup());
    if (resourceVersion !== undefined && resourceVersion < this.store.compactedAt) {
      // kube-apiserver answers 200 and a single ERROR event, then ends the stream.
      this.write({
        type: 'ERROR',
        object: kubeStatus(410, 'Expired', `too old resource version: ${resourceVersion} (${this.store.compactedAt})`),
      });
      this.end();
      return;
    }
    if (resourceVersion === undefined) {
      for (const o of this.store.list(type)) if (matches(o)) this.write({ type: 'ADDED', object: this.present(o) });
    } else {
      for (const e of this.store.eventsAfter(type, resourceVersion)) this.deliver(e);
    }
    const key = typeKeyOf(type);
    this.unsubscribe = this.store.subscribe((e) => {
      if (e.typeKey === key) this.deliver(e);
    });
    if (this.req.bookmarkIntervalMs !== undefined) {
      this.timers.push(setInterval(() => this.bookmark(), this.req.bookmarkIntervalMs));
    }
    if (this.req.timeoutSeconds !== undefined && this.req.timeoutSeconds > 0) {
      this.timers.push(setTimeout(() => this.end(), this.req.timeoutSeconds * 1000));
    }
  }

  /** Ends the stream cleanly (the client sees the response end). */
  end(): void {
    if (!this.res.writableEnded) this.res.end();
    this.cleanup();
  }

  /** Cuts the connection (the client sees a reset, mid-stream). */
  destroy(): void {
    this.res.socket?.destroy();
    this.cleanup();
  }

  private cleanup(): void {
    if (this.closed) return;
    this.closed = true;
    this.unsubscribe?.();
    for (const t of this.timers) clearInterval(t);
    this.onClose(this);
  }

  private present(o: KubeObject, resourceVersion?: number): KubeObject {
    const out: KubeObject = { ...o, apiVersion: apiVersionOf(this.req.type.group, this.req.version) };
    if (resourceVersion !== undefined) out.metadata = { ...metaOf(o), resourceVersion: String(resourceVersion) };
    return out;
  }

  private deliver(e: StoredEvent): void {
    const { matches } = this.req;
    const now = matches(e.object);
    if (e.type !== 'MODIFIED') {
      if (now) this.write({ type: e.type, object: this.present(e.object) });
      return;
    }
    const before = e.previous === undefined ? now : matches(e.previous);
    if (now && before) this.write({ type: 'MODIFIED', object: this.present(e.object) });
    else if (now) this.write({ type: 'ADDED', object: this.present(e.object) });
    else if (before) this.write({ type: 'DELETED', object: this.present(e.previous!, e.rv) });
  }

  private bookmark(): void {
    const t = this.req.type;
    this.write({
      type: 'BOOKMARK',
      object: { kind: t.kind, apiVersion: apiVersionOf(t.group, this.req.version), metadata: { resourceVersion: String(this.store.resourceVersion) } },
    });
  }

  private write(event: { type: string; object: unknown }): void {
    if (this.closed || this.res.writableEnded || this.res.destroyed) return;
    this.res.write(`${JSON.stringify(event)}\n`);
  }
}
