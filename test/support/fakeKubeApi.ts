// A fake Kubernetes API server on loopback (plain HTTP) for the Kubernetes
// tests: no real API server can run on the test machine. It is the one mock
// the tests allow, so it behaves like kube-apiserver for everything it serves:
// discovery (/api, /apis, group versions with verbs, kinds and short names —
// enough for kubectl's REST mapping), list (global resourceVersion, limit and
// continue), watch (JSON lines in resourceVersion order, bookmarks, 410 Gone
// after compact()), label and field selectors, get/create/update/patch/delete
// with Status bodies on errors, CRDs that register their resources.
//
// What the API-server-backed cluster mode relies on is there with the real
// semantics: generateName (fakeKubeNames.ts); resourceVersion preconditions
// on update and patch (409 Conflict; a PUT without one is refused for custom
// resources, CRDs and Leases, fakeKubeStrategy.ts), and delete
// preconditions on uid and resourceVersion; the status subresource
// split; finalizers, and owner references followed by a garbage collector
// (fakeKubeGc.ts: Background, Foreground, Orphan); Leases (fakeKubeLease.ts).
//
// Where it differs from the real server (on purpose, for tests): no
// authentication or admission beyond NamespaceLifecycle (an HTTP create in a
// missing namespace is a 404; the programmatic create() does not check, so
// tests need not make namespaces), deletion has no grace period (an object
// without finalizers goes at once; deleting a namespace leaves its objects),
// the programmatic create()/update() write whole objects, status included,
// whatever their resourceVersion (the test plays kubelet and the
// controllers; HTTP clients get the real rules, except that a built-in's
// status sent with an HTTP create is kept), no Table output (kubectl's
// default columns; name them with -o custom-columns), no server-side apply, no
// protobuf (415), no OpenAPI (404: kubectl needs --validate=false), strategic
// merge patch is a JSON merge patch plus kubectl's directives (see
// fakeKubePatch.ts), list pages are cut from the current state rather than a
// snapshot, and a Namespace does not get the kubernetes.io/metadata.name label
// kube-apiserver adds (tests set it when the namespace's labels matter).
// Custom resources are pruned, defaulted and validated against their CRD's
// schema (fakeKubeCrdSchema.ts); Services, EndpointSlices and Namespaces get the
// real server's defaults and allocations (fakeKubeDefaults.ts).
import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FakeKubeGc, type GcFailure } from './fakeKubeGc.js';
import { FakeKubeHttp } from './fakeKubeHttp.js';
import type { NameSuffixSource } from './fakeKubeNames.js';
import { tendrilCrdObjects } from './fakeKubeResources.js';
import { type DeleteOptions, FakeKubeStore, type KubeObject } from './fakeKubeStore.js';
import type { FakeKubeWatch } from './fakeKubeWatch.js';

export { KubeStatusError } from './fakeKubeStore.js';

export type FakeResource =
  | 'pods'
  | 'namespaces'
  | 'nodes'
  | 'services'
  | 'endpointslices'
  | 'networkpolicies'
  | 'customresourcedefinitions'
  | 'tendrilnetworkpolicies'
  | 'tendrilclusterwidenetworkpolicies'
  | 'tendrilidentities'
  | 'tendrilnodes'
  | 'tendrilendpoints'
  // Built-ins the manifests in deploy/ create, and Cilium's policy CRDs once registered.
  | 'configmaps'
  | 'serviceaccounts'
  | 'daemonsets'
  | 'deployments'
  | 'clusterroles'
  | 'clusterrolebindings'
  | 'ciliumnetworkpolicies'
  | 'ciliumclusterwidenetworkpolicies'
  | 'leases';

export interface FakeKubeApiOptions {
  port?: number;
  /** The IPv4 address it listens on (default 127.0.0.1): a bench's fake on a bridge its agents reach, as they reach etcd. */
  host?: string;
  /** How often a watch that asked for bookmarks gets one (default 1000 ms). */
  bookmarkIntervalMs?: number;
  /** Registers the tendril CRDs of deploy/kubernetes/crds/ (schema included) for tests that do not apply them with kubectl. */
  crds?: 'tendril';
  /**
   * Where generateName's 5 random characters come from (default: random, from the
   * real alphabet). Only for tests of what a taken generated name does.
   */
  nameSuffix?: NameSuffixSource;
}

export class FakeKubeApi {
  readonly url: string;
  private readonly store: FakeKubeStore;
  private readonly gc: FakeKubeGc;
  private readonly watches = new Set<FakeKubeWatch>();
  private readonly counts = new Map<string, number>();
  private readonly http: FakeKubeHttp;
  private tempDirMade: Promise<string> | undefined;
  private listening = false;
  private stopped = false;

  private constructor(
    private readonly server: Server,
    private readonly port: number,
    private readonly sockets: Set<Socket>,
    bookmarkIntervalMs: number,
    nameSuffix: NameSuffixSource | undefined,
    private readonly host: string,
  ) {
    this.url = `http://${host}:${port}`;
    this.store = new FakeKubeStore(nameSuffix);
    this.gc = new FakeKubeGc(this.store);
    this.gc.start();
    this.http = new FakeKubeHttp({ store: this.store, watches: this.watches, counts: this.counts, port, bookmarkIntervalMs });
  }

  static async start(o: FakeKubeApiOptions = {}): Promise<FakeKubeApi> {
    // The port is known only once listening, and the API object needs it: requests before then are refused.
    const ready: { api?: FakeKubeApi } = {};
    const server = createServer((req, res) => {
      if (ready.api === undefined) res.destroy();
      else ready.api.http.handle(req, res);
    });
    server.keepAliveTimeout = 60_000;
    const sockets = new Set<Socket>();
    server.on('connection', (s: Socket) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(o.port ?? 0, o.host ?? '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    const addr = server.address();
    if (addr === null || typeof addr === 'string') throw new Error('fake kube API: no TCP address');
    const api = new FakeKubeApi(server, addr.port, sockets, o.bookmarkIntervalMs ?? 1000, o.nameSuffix, o.host ?? '127.0.0.1');
    ready.api = api;
    api.listening = true;
    try {
      if (o.crds === 'tendril') for (const crd of tendrilCrdObjects()) api.create('customresourcedefinitions', crd);
    } catch (err) {
      await api.stop();
      throw err;
    }
    return api;
  }

  /** Writes a kubeconfig for this server (insecure-skip-tls-verify: the server is plain HTTP) and returns its path. */
  async kubeconfig(): Promise<string> {
    // The promise is what is kept: callers at once (operators started together) share one directory, which stop() removes.
    this.tempDirMade ??= mkdtemp(join(tmpdir(), 'tdl-fakekube-'));
    const file = join(await this.tempDirMade, 'kubeconfig');
    const config = {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'fake', cluster: { server: this.url, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'fake', user: {} }],
      contexts: [{ name: 'fake', context: { cluster: 'fake', user: 'fake', namespace: 'default' } }],
      'current-context': 'fake',
    };
    await writeFile(file, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
    return file;
  }

  /**
   * Stores a new object (namespace from its metadata, 'default' when unset; generateName
   * expanded when it has no name); throws KubeStatusError 409 if it exists.
   */
  create<T extends object>(resource: FakeResource, obj: T): T {
    return structuredClone(this.store.create(this.store.typeByPlural(resource), obj as KubeObject)) as T;
  }

  /** Replaces an object, whatever its metadata.resourceVersion (the test is the writer); throws KubeStatusError 404 if missing. */
  update<T extends object>(resource: FakeResource, obj: T): T {
    return structuredClone(this.store.update(this.store.typeByPlural(resource), obj as KubeObject, { writer: 'test' })) as T;
  }

  /**
   * Deletes an object as a client's DELETE does: at once unless it has finalizers;
   * its dependents are then collected (or orphaned) by the garbage collector, shortly after.
   */
  delete(resource: FakeResource, namespace: string | undefined, name: string, o: DeleteOptions = {}): void {
    this.store.delete(this.store.typeByPlural(resource), namespace, name, o);
  }

  /** Writes the garbage collector had refused (it leaves such an object as it is). */
  gcFailures(): GcFailure[] {
    return [...this.gc.failures];
  }

  get(resource: FakeResource, namespace: string | undefined, name: string): object | undefined {
    const o = this.store.get(this.store.typeByPlural(resource), namespace, name);
    return o === undefined ? undefined : structuredClone(o);
  }

  list(resource: FakeResource): object[] {
    return this.store.list(this.store.typeByPlural(resource)).map((o) => structuredClone(o));
  }

  /** The current (global) resourceVersion. */
  get resourceVersion(): number {
    return this.store.resourceVersion;
  }

  /** Forgets the event history up to now: a watch from an older resourceVersion gets 410 Gone. */
  compact(): void {
    this.store.compact();
  }

  /**
   * Ends every open watch. By default the response ends cleanly (as when the
   * server's watch timeout expires: the client resumes from its last
   * resourceVersion); `abrupt` cuts the connection mid-stream instead.
   */
  dropWatches(o: { abrupt?: boolean } = {}): void {
    for (const w of [...this.watches]) {
      if (o.abrupt === true) w.destroy();
      else w.end();
    }
  }

  /** How many watch connections are open now. */
  get openWatches(): number {
    return this.watches.size;
  }

  /** Stops answering: closes the listener and every connection (open watches see a reset). State is kept. */
  async pause(): Promise<void> {
    if (!this.listening) return;
    this.listening = false;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const w of [...this.watches]) w.destroy();
    for (const s of this.sockets) s.destroy();
    await closed;
  }

  /** Listens again on the same port. */
  async resume(): Promise<void> {
    if (this.listening || this.stopped) return;
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.port, this.host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    this.listening = true;
  }

  /**
   * Requests served since start (or resetRequests): by verb (`list`, `watch`,
   * `get`, `create`, `update`, `patch`, `delete`, `deletecollection`,
   * `discovery`) and by verb and resource (`list:pods`, `watch:pods`). One
   * count per HTTP request, whatever its answer.
   */
  requests(): Record<string, number> {
    return Object.fromEntries(this.counts);
  }

  resetRequests(): void {
    this.counts.clear();
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    await this.pause();
    this.gc.stop();
    this.stopped = true;
    if (this.tempDirMade !== undefined) await rm(await this.tempDirMade, { recursive: true, force: true });
    this.tempDirMade = undefined;
  }
}
