// The HTTP side of the fake Kubernetes API server: discovery documents, and
// the verbs on resources (get, list, watch, create, update, patch, delete,
// deletecollection) with kube-apiserver's paths, query parameters, media
// types and Status errors, over the store. One count per request, by verb and
// by verb:resource, for tests that assert what a client asked for.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parse as parseYaml } from 'yaml';
import { generatedName, randomNameSuffix } from './fakeKubeNames.js';
import { jsonMergePatch, jsonPatch, PatchError, strategicMergePatch } from './fakeKubePatch.js';
import { apiGroup, apiGroupList, apiResourceList, apiVersionOf, type FakeResourceType } from './fakeKubeResources.js';
import { type ObjectMatcher, parseFieldSelector, parseLabelSelector, SelectorError } from './fakeKubeSelectors.js';
import {
  type FakeKubeStore,
  type KubeObject,
  kubeStatus,
  KubeStatusError,
  metaOf,
  nameOf,
  namespaceOf,
  notFound,
  type DeleteOptions,
} from './fakeKubeStore.js';
import { FakeKubeWatch } from './fakeKubeWatch.js';

type Verb = 'get' | 'list' | 'watch' | 'create' | 'update' | 'patch' | 'delete' | 'deletecollection';

const VERSION_INFO = {
  major: '1',
  minor: '32',
  gitVersion: 'v1.32.0-tendril-fake',
  gitCommit: '0000000000000000000000000000000000000000',
  gitTreeState: 'clean',
  buildDate: '2026-01-01T00:00:00Z',
  goVersion: 'go1.23.0',
  compiler: 'gc',
  platform: 'linux/amd64',
};

const BODY_TYPES = ['application/json', 'application/yaml'];
const PATCH_TYPES = ['application/merge-patch+json', 'application/strategic-merge-patch+json', 'application/json-patch+json'];

function mediaType(header: string | undefined): string {
  return (header ?? '').split(';')[0]!.trim().toLowerCase();
}

function badRequest(message: string): KubeStatusError {
  return new KubeStatusError(kubeStatus(400, 'BadRequest', message));
}

function unsupportedMediaType(accepted: readonly string[]): KubeStatusError {
  return new KubeStatusError(
    kubeStatus(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: ${accepted.join(', ')}`),
  );
}

export interface FakeKubeHttpContext {
  store: FakeKubeStore;
  /** Open watches (the server ends or cuts them on dropWatches, pause and stop). */
  watches: Set<FakeKubeWatch>;
  /** Request counts, by verb and by verb:resource. */
  counts: Map<string, number>;
  port: number;
  bookmarkIntervalMs: number;
}

export class FakeKubeHttp {
  private readonly store: FakeKubeStore;
  private readonly watches: Set<FakeKubeWatch>;
  private readonly counts: Map<string, number>;
  private readonly port: number;
  private readonly bookmarkIntervalMs: number;

  constructor(ctx: FakeKubeHttpContext) {
    this.store = ctx.store;
    this.watches = ctx.watches;
    this.counts = ctx.counts;
    this.port = ctx.port;
    this.bookmarkIntervalMs = ctx.bookmarkIntervalMs;
  }

  private count(verb: string, resource?: string): void {
    this.counts.set(verb, (this.counts.get(verb) ?? 0) + 1);
    if (resource !== undefined) this.counts.set(`${verb}:${resource}`, (this.counts.get(`${verb}:${resource}`) ?? 0) + 1);
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    this.route(req, res).catch((err: unknown) => this.fail(res, err));
  }

  private fail(res: ServerResponse, err: unknown): void {
    let status;
    if (err instanceof KubeStatusError) status = err.status;
    else if (err instanceof SelectorError) status = kubeStatus(400, 'BadRequest', err.message);
    else if (err instanceof PatchError) status = kubeStatus(422, 'Invalid', err.message);
    else status = kubeStatus(500, 'InternalError', `fake kube API: ${err instanceof Error ? err.message : String(err)}`);
    if (res.headersSent) {
      res.destroy();
      return;
    }
    this.send(res, status.code, status);
  }

  private send(res: ServerResponse, code: number, body: unknown): void {
    const text = JSON.stringify(body);
    res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), 'Cache-Control': 'no-cache, private' });
    res.end(text);
  }

  private notFoundPath(): KubeStatusError {
    return new KubeStatusError(kubeStatus(404, 'NotFound', 'the server could not find the requested resource'));
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://fake');
    const segs = url.pathname.split('/').filter((s) => s !== '').map(decodeURIComponent);
    const [root, a, b] = segs;
    if (root === 'version' && segs.length === 1) return this.discovery(res, VERSION_INFO);
    if (root === 'healthz' || root === 'livez' || root === 'readyz') {
      this.count('discovery');
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end('ok');
      return;
    }
    if (root === 'api') {
      if (segs.length === 1) {
        return this.discovery(res, {
          kind: 'APIVersions',
          versions: ['v1'],
          serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress: `127.0.0.1:${this.port}` }],
        });
      }
      if (a !== 'v1') return this.discoveryMiss();
      if (segs.length === 2) return this.discovery(res, apiResourceList(this.store.types, '', 'v1'));
      return this.resource(req, res, url, '', 'v1', segs.slice(2));
    }
    if (root === 'apis') {
      if (segs.length === 1) return this.discovery(res, apiGroupList(this.store.types));
      const group = apiGroup(this.store.types, a!);
      if (group === undefined) return this.discoveryMiss();
      if (segs.length === 2) return this.discovery(res, { kind: 'APIGroup', apiVersion: 'v1', ...group });
      if (!this.store.types.some((t) => t.group === a && t.versions.includes(b!))) return this.discoveryMiss();
      if (segs.length === 3) return this.discovery(res, apiResourceList(this.store.types, a!, b!));
      return this.resource(req, res, url, a!, b!, segs.slice(3));
    }
    // /openapi/v2 and /openapi/v3 included: the fake publishes no schema.
    return this.discoveryMiss();
  }

  private discovery(res: ServerResponse, body: unknown): void {
    this.count('discovery');
    this.send(res, 200, body);
  }

  private discoveryMiss(): never {
    this.count('discovery');
    throw this.notFoundPath();
  }

  private async resource(req: IncomingMessage, res: ServerResponse, url: URL, group: string, version: string, rest: string[]): Promise<void> {
    let namespace: string | undefined;
    let parts = rest;
    if (rest[0] === 'namespaces' && rest.length >= 3 && this.store.findType(group, version, rest[2]!)?.namespaced === true) {
      namespace = rest[1];
      parts = rest.slice(2);
    }
    const [plural, name, sub, ...extra] = parts;
    const type = this.store.findType(group, version, plural!);
    if (type === undefined || extra.length > 0 || (sub !== undefined && (sub !== 'status' || type.statusSubresource !== true))) {
      this.count('unknown');
      throw this.notFoundPath();
    }
    if (namespace !== undefined && !type.namespaced) {
      this.count('unknown');
      throw this.notFoundPath();
    }
    const accept = req.headers.accept;
    // kubectl offers protobuf with a JSON fallback; a client that takes only protobuf gets 406.
    if (accept !== undefined && accept !== '' && !/json|\*\/\*|application\/\*/.test(accept)) {
      this.count('notacceptable', type.plural);
      throw new KubeStatusError(kubeStatus(406, 'NotAcceptable', 'only the following media types are accepted: application/json'));
    }
    const method = req.method ?? 'GET';
    const q = url.searchParams;
    let verb: Verb;
    if (method === 'GET') verb = name !== undefined ? 'get' : q.get('watch') === 'true' || q.get('watch') === '1' ? 'watch' : 'list';
    else if (method === 'POST' && name === undefined) verb = 'create';
    else if (method === 'PUT' && name !== undefined) verb = 'update';
    else if (method === 'PATCH' && name !== undefined) verb = 'patch';
    else if (method === 'DELETE') verb = name !== undefined ? 'delete' : 'deletecollection';
    else {
      this.count('unknown', type.plural);
      throw new KubeStatusError(kubeStatus(405, 'MethodNotAllowed', `the server does not allow this method on the requested resource`));
    }
    const subresource = sub === 'status' ? 'status' : undefined;
    if (subresource !== undefined && verb !== 'get' && verb !== 'update' && verb !== 'patch') {
      this.count('unknown', type.plural);
      throw new KubeStatusError(kubeStatus(405, 'MethodNotAllowed', `the server does not allow this method on the requested resource`));
    }
    this.count(verb, type.plural);
    const dryRun = q.get('dryRun') === 'All';
    switch (verb) {
      case 'get': {
        const o = this.store.get(type, namespace, name!);
        if (o === undefined) throw notFound(type, name!);
        return this.send(res, 200, this.present(type, version, o));
      }
      case 'list':
        return this.serveList(res, type, version, namespace, q);
      case 'watch':
        return this.serveWatch(res, type, version, namespace, q);
      case 'create': {
        const body = this.checkedBody(type, group, version, namespace, await this.readBody(req, BODY_TYPES));
        this.requireNamespace(type, namespace);
        if (dryRun) return this.send(res, 201, this.present(type, version, this.dryRunCreate(type, body)));
        return this.send(res, 201, this.present(type, version, this.store.create(type, body, { writer: 'client' })));
      }
      case 'update': {
        const body = this.checkedBody(type, group, version, namespace, await this.readBody(req, BODY_TYPES));
        if (nameOf(body) !== name) throw badRequest(`the name of the object (${nameOf(body)}) does not match the name on the URL (${name})`);
        if (dryRun) return this.send(res, 200, this.present(type, version, body));
        return this.send(res, 200, this.present(type, version, this.store.update(type, body, { writer: 'client', subresource })));
      }
      case 'patch': {
        const accepted = type.custom ? PATCH_TYPES.filter((t) => !t.includes('strategic')) : PATCH_TYPES;
        const ct = mediaType(req.headers['content-type']);
        if (!accepted.includes(ct)) {
          await this.drain(req);
          throw unsupportedMediaType(accepted);
        }
        const patch = await this.readBody(req, accepted);
        const current = this.store.get(type, namespace, name!);
        if (current === undefined) throw notFound(type, name!);
        type J = Parameters<typeof jsonMergePatch>[1];
        const base = structuredClone(current) as J;
        const patched =
          ct === 'application/json-patch+json'
            ? jsonPatch(base, patch as J)
            : ct === 'application/strategic-merge-patch+json'
              ? strategicMergePatch(base, patch as J)
              : jsonMergePatch(base, patch as J);
        if (patched === null || typeof patched !== 'object' || Array.isArray(patched)) throw new PatchError('the patch does not leave an object');
        const obj = patched as KubeObject;
        const meta = metaOf(obj);
        if (nameOf(obj) !== name || (type.namespaced && namespaceOf(obj) !== namespaceOf(current))) {
          throw new KubeStatusError(kubeStatus(422, 'Invalid', `${type.kind} "${name}" is invalid: metadata.name: Invalid value: the patch changes the object's name or namespace`));
        }
        meta.uid = metaOf(current).uid;
        if (dryRun) return this.send(res, 200, this.present(type, version, obj));
        return this.send(res, 200, this.present(type, version, this.store.update(type, obj, { writer: 'client', subresource })));
      }
      case 'delete': {
        const options = await this.deleteOptions(req, q);
        if (dryRun) {
          const o = this.store.get(type, namespace, name!);
          if (o === undefined) throw notFound(type, name!);
          return this.send(res, 200, this.present(type, version, o));
        }
        return this.send(res, 200, this.present(type, version, this.store.delete(type, namespace, name!, options)));
      }
      case 'deletecollection': {
        const options = await this.deleteOptions(req, q);
        const matches = this.matcher(type, namespace, q);
        const gone = this.store.list(type, namespace).filter(matches);
        const items = dryRun ? gone : gone.map((o) => this.store.delete(type, namespaceOf(o), nameOf(o), options));
        return this.send(res, 200, this.listBody(type, version, items, {}));
      }
    }
  }

  /** How the object looks when served at `version`. */
  private present(type: FakeResourceType, version: string, o: KubeObject): KubeObject {
    return { ...o, apiVersion: apiVersionOf(type.group, version) };
  }

  private listBody(type: FakeResourceType, version: string, items: KubeObject[], meta: Record<string, unknown>): object {
    // Typed lists of built-ins come without apiVersion/kind in their items; unstructured (custom) ones keep them.
    const shown = items.map((o) => {
      if (type.custom) return this.present(type, version, o);
      const { apiVersion: _a, kind: _k, ...rest } = o;
      return rest;
    });
    return {
      apiVersion: apiVersionOf(type.group, version),
      kind: `${type.kind}List`,
      metadata: { resourceVersion: String(this.store.resourceVersion), ...meta },
      items: shown,
    };
  }

  private matcher(type: FakeResourceType, namespace: string | undefined, q: URLSearchParams): ObjectMatcher {
    const labels = parseLabelSelector(q.get('labelSelector'));
    const fields = parseFieldSelector(q.get('fieldSelector'), ['metadata.name', 'metadata.namespace', ...(type.extraFieldSelectors ?? [])]);
    return (o) => (namespace === undefined || namespaceOf(o) === namespace) && labels(o) && fields(o);
  }

  private serveList(res: ServerResponse, type: FakeResourceType, version: string, namespace: string | undefined, q: URLSearchParams): void {
    const matches = this.matcher(type, namespace, q);
    let items = this.store.list(type, namespace).filter(matches);
    const keyOf = (o: KubeObject): string => `${namespaceOf(o)}/${nameOf(o)}`;
    const cont = q.get('continue');
    if (cont !== null && cont !== '') {
      let after: string;
      try {
        after = (JSON.parse(Buffer.from(cont, 'base64url').toString('utf8')) as { after: string }).after;
      } catch {
        throw badRequest('continue key is not valid: illegal base64 data');
      }
      items = items.filter((o) => keyOf(o) > after);
    }
    const limit = Number(q.get('limit') ?? '0');
    const meta: Record<string, unknown> = {};
    if (Number.isInteger(limit) && limit > 0 && items.length > limit) {
      meta.remainingItemCount = items.length - limit;
      items = items.slice(0, limit);
      meta.continue = Buffer.from(JSON.stringify({ after: keyOf(items[items.length - 1]!) })).toString('base64url');
    }
    this.send(res, 200, this.listBody(type, version, items, meta));
  }

  private serveWatch(res: ServerResponse, type: FakeResourceType, version: string, namespace: string | undefined, q: URLSearchParams): void {
    const matches = this.matcher(type, namespace, q);
    const rvParam = q.get('resourceVersion');
    let resourceVersion: number | undefined;
    if (rvParam !== null && rvParam !== '' && rvParam !== '0') {
      resourceVersion = Number(rvParam);
      if (!Number.isSafeInteger(resourceVersion) || resourceVersion < 0) {
        throw badRequest(`resourceVersion: Invalid value: "${rvParam}": must be a non-negative integer`);
      }
    }
    const timeout = q.get('timeoutSeconds');
    const w = new FakeKubeWatch(
      this.store,
      {
        type,
        version,
        matches,
        resourceVersion,
        bookmarkIntervalMs: q.get('allowWatchBookmarks') === 'true' ? this.bookmarkIntervalMs : undefined,
        timeoutSeconds: timeout === null ? undefined : Number(timeout),
      },
      res,
      (closed) => this.watches.delete(closed),
    );
    this.watches.add(w);
    w.start();
  }

  /** kube-apiserver's NamespaceLifecycle admission: nothing is created in a namespace that does not exist. */
  private requireNamespace(type: FakeResourceType, namespace: string | undefined): void {
    if (!type.namespaced || namespace === undefined) return;
    const nsType = this.store.typeByPlural('namespaces');
    if (this.store.get(nsType, undefined, namespace) === undefined) throw notFound(nsType, namespace);
  }

  private dryRunCreate(type: FakeResourceType, body: KubeObject): KubeObject {
    const prefix = metaOf(body).generateName;
    if (nameOf(body) === '' && typeof prefix === 'string' && prefix !== '') metaOf(body).name = generatedName(prefix, randomNameSuffix());
    const existing = nameOf(body) === '' ? undefined : this.store.get(type, namespaceOf(body), nameOf(body));
    if (existing !== undefined) {
      throw new KubeStatusError(kubeStatus(409, 'AlreadyExists', `${type.plural} "${nameOf(body)}" already exists`, { name: nameOf(body), kind: type.plural }));
    }
    return body;
  }

  /** The body's apiVersion, kind and namespace must agree with the URL, as the real server checks. */
  private checkedBody(type: FakeResourceType, group: string, version: string, namespace: string | undefined, body: unknown): KubeObject {
    if (body === null || typeof body !== 'object' || Array.isArray(body)) throw badRequest('the body of the request must be an object');
    const obj = body as KubeObject;
    const expected = apiVersionOf(group, version);
    if (obj.apiVersion !== undefined && obj.apiVersion !== expected) {
      throw badRequest(`the API version in the data (${String(obj.apiVersion)}) does not match the expected API version (${expected})`);
    }
    if (obj.kind !== undefined && obj.kind !== type.kind) {
      throw badRequest(`the kind in the data (${String(obj.kind)}) does not match the expected kind (${type.kind})`);
    }
    const meta = metaOf(obj);
    if (type.namespaced) {
      if (namespace === undefined) throw this.notFoundPath();
      if (meta.namespace !== undefined && meta.namespace !== '' && meta.namespace !== namespace) {
        throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
      }
      meta.namespace = namespace;
    }
    return obj;
  }

  /** DeleteOptions from the body (JSON, as clients send it) or the query: the cascade and the preconditions. */
  private async deleteOptions(req: IncomingMessage, q: URLSearchParams): Promise<DeleteOptions> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8').trim();
    let body: Record<string, unknown> = {};
    if (text !== '') {
      try {
        body = JSON.parse(text) as Record<string, unknown>;
      } catch (err) {
        throw badRequest(`the body of the request could not be decoded: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
    let policy = q.get('propagationPolicy') ?? body.propagationPolicy;
    // The legacy orphanDependents flag, which the policy replaced.
    if (policy === undefined && body.orphanDependents !== undefined) policy = body.orphanDependents === true ? 'Orphan' : 'Background';
    if (q.get('orphanDependents') !== null && policy === undefined) policy = q.get('orphanDependents') === 'true' ? 'Orphan' : 'Background';
    const out: DeleteOptions = {};
    const pre = body.preconditions as { uid?: unknown; resourceVersion?: unknown } | undefined | null;
    if (pre !== undefined && pre !== null) {
      out.preconditions = {};
      if (typeof pre.uid === 'string') out.preconditions.uid = pre.uid;
      if (typeof pre.resourceVersion === 'string') out.preconditions.resourceVersion = pre.resourceVersion;
    }
    if (policy === undefined || policy === null) return out;
    if (policy !== 'Background' && policy !== 'Foreground' && policy !== 'Orphan') {
      throw new KubeStatusError(
        kubeStatus(422, 'Invalid', `DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "${String(policy)}": supported values: "Foreground", "Background", "Orphan"`),
      );
    }
    out.propagationPolicy = policy;
    return out;
  }

  private async drain(req: IncomingMessage): Promise<void> {
    for await (const _chunk of req) {
      // discard
    }
  }

  /** The request body as a JS value; 415 for a media type the fake does not decode (protobuf among them). */
  private async readBody(req: IncomingMessage, accepted: readonly string[]): Promise<unknown> {
    const ct = mediaType(req.headers['content-type']);
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (!accepted.includes(ct)) throw unsupportedMediaType(accepted);
    const text = Buffer.concat(chunks).toString('utf8');
    try {
      return ct === 'application/yaml' ? parseYaml(text) : JSON.parse(text);
    } catch (err) {
      throw badRequest(`the body of the request could not be decoded: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
}
