// The YAML in deploy/kubernetes/ checked by a real Kubernetes client: Debian's
// kubectl, pointed at the fake API server (no real one can run here). kubectl
// does its own discovery and REST mapping, so a CRD that does not register, a
// kind or scope that does not match, or an example its CRD's schema refuses
// or prunes (the fake validates custom resources as kube-apiserver does) fails
// here. The manifests of built-in kinds go through `--dry-run=client`.
// kubectl 1.32 sends JSON for apply, get, delete, label and annotate, but
// protobuf bodies for `kubectl create <built-in kind>`, which the fake refuses
// (415; kubectl fails with "UnsupportedMediaType"): namespaces are made with
// apply here. The second suite checks, through kubectl, what the
// Kubernetes-backed cluster mode relies on: generateName, resourceVersion
// preconditions, cascading deletion, Leases, the status subresource, and
// watches of cluster-scoped custom resources.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { parseAllDocuments, stringify as stringifyYaml } from 'yaml';
import { FakeKubeApi, type FakeResource } from '../support/fakeKubeApi.js';
import { NAME_ALPHABET } from '../support/fakeKubeNames.js';
import { TEST_CRD_GROUP, testCrd } from '../support/fakeKubeTestCrds.js';
import { run, type RunResult, toolEnv } from '../support/run.js';

const KUBECTL = '/usr/bin/kubectl';
const DEPLOY = fileURLToPath(new URL('../../../deploy/kubernetes/', import.meta.url));
const CRDS = join(DEPLOY, 'crds');
const EXAMPLES = join(DEPLOY, 'examples');

interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [field: string]: unknown;
}

function yamlFiles(dir: string): string[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.yaml') || f.endsWith('.yml'))
    .sort()
    .map((f) => join(dir, f));
}

function manifests(file: string): Manifest[] {
  return parseAllDocuments(readFileSync(file, 'utf8'))
    .map((d) => d.toJS() as Manifest | null)
    .filter((d): d is Manifest => d !== null);
}

function allManifests(dir: string): Manifest[] {
  return yamlFiles(dir).flatMap(manifests);
}

/** What an object says beyond its metadata and status: the part kubectl must deliver intact. */
function content(o: Record<string, unknown>): Record<string, unknown> {
  const { metadata: _m, status: _s, apiVersion: _a, kind: _k, ...rest } = o;
  return rest;
}

/**
 * A minimal CRD for a Cilium policy kind. On a cluster that runs Cilium, Cilium
 * installs these; tendril does not ship them, and its CiliumNetworkPolicy
 * example is meant for such clusters (and `tendril policy import`).
 */
function ciliumCrd(kind: string, namespaced: boolean): object {
  const plural = `${kind.toLowerCase()}s`;
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${plural}.cilium.io` },
    spec: {
      group: 'cilium.io',
      names: { plural, singular: kind.toLowerCase(), kind, listKind: `${kind}List` },
      scope: namespaced ? 'Namespaced' : 'Cluster',
      versions: [{ name: 'v2', served: true, storage: true, schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } } }],
    },
  };
}

/** kubectl with a suite's kubeconfig and its own HOME and cache (both set in the suite's before hook). */
function kubectlRunner(ctx: () => { kubeconfig: string; home: string }) {
  const kubectlWithInput = (input: string, ...args: string[]): Promise<RunResult> => kubectlTimed(60_000, input, ...args);
  const kubectlTimed = (timeoutMs: number, input: string, ...args: string[]): Promise<RunResult> => {
    const { kubeconfig, home } = ctx();
    return run([KUBECTL, '--kubeconfig', kubeconfig, '--cache-dir', join(home, 'cache'), ...args], {
      env: { ...toolEnv(), HOME: home, KUBECONFIG: kubeconfig },
      input,
      timeoutMs,
    });
  };
  const kubectl = (...args: string[]): Promise<RunResult> => kubectlWithInput('', ...args);
  const kubectlOk = async (...args: string[]): Promise<string> => {
    const r = await kubectl(...args);
    assert.equal(r.code, 0, `kubectl ${args.join(' ')} failed: ${r.stderr}${r.stdout}`);
    return r.stdout;
  };
  return { kubectlWithInput, kubectlTimed, kubectl, kubectlOk };
}

describe('kubectl against the fake API server applies deploy/kubernetes/', () => {
  let fake: FakeKubeApi;
  let kubeconfig: string;
  let home: string;

  const { kubectlWithInput, kubectl, kubectlOk } = kubectlRunner(() => ({ kubeconfig, home }));

  /** `kubectl create namespace` would send protobuf (see the test below); apply sends JSON. */
  const createNamespace = async (name: string): Promise<void> => {
    const r = await kubectlWithInput(JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name } }), 'apply', '--validate=false', '-f', '-');
    assert.equal(r.code, 0, r.stderr);
  };

  /** The resource (plural) serving a manifest's kind, from the fake's discovery as kubectl maps it. */
  const resourceOf = async (m: Manifest): Promise<FakeResource> => {
    const path = m.apiVersion.includes('/') ? `/apis/${m.apiVersion}` : `/api/${m.apiVersion}`;
    const list = (await (await fetch(`${fake.url}${path}`)).json()) as { resources: Array<{ name: string; kind: string }> };
    const r = list.resources.find((x) => x.kind === m.kind);
    assert.ok(r, `${m.kind} (${m.apiVersion}) is not served`);
    return r.name as FakeResource;
  };

  before(async () => {
    fake = await FakeKubeApi.start();
    kubeconfig = await fake.kubeconfig();
    home = await mkdtemp(join(tmpdir(), 'tdl-kubectl-'));
  });
  after(async () => {
    await fake?.stop();
    if (home !== undefined) await rm(home, { recursive: true, force: true });
  });

  test('kubectl is the v1.x client and reaches the fake', async () => {
    const version = JSON.parse(await kubectlOk('version', '-o', 'json')) as { clientVersion: { major: string }; serverVersion: { gitVersion: string } };
    assert.equal(version.clientVersion.major, '1');
    assert.match(version.serverVersion.gitVersion, /^v1\./);
  });

  test('apply the CRDs: each is stored as written and registers its resource', async () => {
    const crds = allManifests(CRDS);
    assert.ok(crds.length >= 2, 'deploy/kubernetes/crds/ holds the tendril CRDs');
    const out = await kubectlOk('apply', '--validate=false', '-f', CRDS);
    for (const crd of crds) {
      assert.equal(crd.kind, 'CustomResourceDefinition');
      assert.match(out, new RegExp(`customresourcedefinition\\.apiextensions\\.k8s\\.io/${crd.metadata.name.replace(/\./g, '\\.')} created`));
      const stored = fake.get('customresourcedefinitions', undefined, crd.metadata.name) as Record<string, unknown> | undefined;
      assert.ok(stored, `${crd.metadata.name} is in the API`);
      assert.deepEqual(content(stored), content(crd));
    }
    const names = crds.map((c) => c.metadata.name).sort();
    assert.deepEqual(names, ['tendrilclusterwidenetworkpolicies.tendril.io', 'tendrilendpoints.tendril.io', 'tendrilidentities.tendril.io', 'tendrilnetworkpolicies.tendril.io', 'tendrilnodes.tendril.io']);
    const resources = (await kubectlOk('api-resources', '--api-group=tendril.io', '-o', 'name')).trim().split('\n').sort();
    assert.deepEqual(resources, names);
  });

  test('apply the examples: each object is in the API exactly as written, nothing pruned by its CRD schema', async () => {
    const examples = allManifests(EXAMPLES);
    assert.ok(examples.some((m) => m.kind === 'TendrilNetworkPolicy'));
    assert.ok(examples.some((m) => m.kind === 'TendrilClusterwideNetworkPolicy'));
    for (const kind of ['CiliumNetworkPolicy', 'CiliumClusterwideNetworkPolicy']) {
      if (examples.some((m) => m.apiVersion.startsWith('cilium.io/') && m.kind === kind)) {
        fake.create('customresourcedefinitions', ciliumCrd(kind, kind === 'CiliumNetworkPolicy'));
      }
    }
    // As on a cluster, the examples' namespaces must exist first.
    const missing = await kubectl('apply', '--validate=false', '-f', EXAMPLES);
    assert.notEqual(missing.code, 0);
    assert.match(missing.stderr, /namespaces "[^"]+" not found/);
    for (const ns of new Set(examples.flatMap((m) => (m.metadata.namespace === undefined ? [] : [m.metadata.namespace])))) {
      await createNamespace(ns);
    }
    const out = await kubectlOk('apply', '--validate=false', '-f', EXAMPLES);
    assert.equal(out.trim().split('\n').length, examples.length, out);
    for (const m of examples) {
      const stored = fake.get(await resourceOf(m), m.metadata.namespace, m.metadata.name) as Manifest | undefined;
      assert.ok(stored, `${m.kind} ${m.metadata.name} is in the API`);
      assert.deepEqual(content(stored), content(m), `${m.kind} ${m.metadata.name} as stored`);
      assert.deepEqual(stored.metadata.labels ?? {}, m.metadata.labels ?? {});
      const lastApplied = JSON.parse(stored.metadata.annotations?.['kubectl.kubernetes.io/last-applied-configuration'] ?? 'null') as Manifest;
      assert.deepEqual(content(lastApplied), content(m));
    }
  });

  test('a second apply changes nothing', async () => {
    const rv = fake.resourceVersion;
    fake.resetRequests();
    const out = await kubectlOk('apply', '--validate=false', '-f', CRDS, '-f', EXAMPLES);
    const lines = out.trim().split('\n');
    assert.equal(lines.length, allManifests(CRDS).length + allManifests(EXAMPLES).length);
    for (const line of lines) assert.match(line, / unchanged$/);
    assert.equal(fake.resourceVersion, rv);
    assert.equal(fake.requests().patch ?? 0, 0);
    assert.equal(fake.requests().create ?? 0, 0);
  });

  test('kubectl get lists the policies, by plural and by short name', async () => {
    const examples = allManifests(EXAMPLES);
    const names = (kind: string): string[] =>
      examples
        .filter((m) => m.kind === kind)
        .map((m) => `${m.metadata.namespace ?? ''}/${m.metadata.name}`)
        .sort();
    const listed = async (...args: string[]): Promise<string[]> => {
      const list = JSON.parse(await kubectlOk('get', ...args, '-o', 'json')) as { items: Manifest[] };
      return list.items.map((i) => `${i.metadata.namespace ?? ''}/${i.metadata.name}`).sort();
    };
    assert.deepEqual(await listed('tendrilnetworkpolicies', '-A'), names('TendrilNetworkPolicy'));
    assert.deepEqual(await listed('tnp', '--all-namespaces'), names('TendrilNetworkPolicy'));
    assert.deepEqual(await listed('tendrilclusterwidenetworkpolicies'), names('TendrilClusterwideNetworkPolicy'));
  });

  test('a policy its CRD schema refuses is rejected by the API with the field named', async () => {
    const bad = join(home, 'bad-policy.yaml');
    await writeFile(
      bad,
      'apiVersion: tendril.io/v1\nkind: TendrilNetworkPolicy\nmetadata: {name: tdl-bad, namespace: tdl-kubectl}\nspec:\n  endpointSelector: 5\n',
    );
    await createNamespace('tdl-kubectl');
    const r = await kubectl('apply', '--validate=false', '-f', bad);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /is invalid/);
    assert.match(r.stderr, /spec\.endpointSelector/);
    assert.equal(fake.get('tendrilnetworkpolicies', 'tdl-kubectl', 'tdl-bad'), undefined);
  });

  test('kubectl create sends built-in objects as protobuf: the fake answers 415 and kubectl says so', async () => {
    const r = await kubectl('create', 'namespace', 'tdl-protobuf');
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /UnsupportedMediaType/);
    assert.equal(fake.get('namespaces', undefined, 'tdl-protobuf'), undefined);
  });

  test('the install manifest applied for real, then changed: the patch kubectl sends leaves what the file says', async () => {
    const file = join(DEPLOY, 'tendril.yaml');
    const docs = manifests(file);
    for (const ns of new Set(docs.flatMap((m) => (m.metadata.namespace === undefined ? [] : [m.metadata.namespace])))) await createNamespace(ns);
    await kubectlOk('apply', '--validate=false', '-f', file);
    const again = await kubectlOk('apply', '--validate=false', '-f', file);
    for (const line of again.trim().split('\n')) assert.match(line, / unchanged$/);

    // A new image, one more env var and one volume fewer: a strategic merge patch with $setElementOrder lists.
    const changed = structuredClone(docs);
    const ds = changed.find((m) => m.kind === 'DaemonSet');
    assert.ok(ds, 'tendril.yaml has the DaemonSet');
    const pod = (ds.spec as { template: { spec: { containers: Array<{ image: string; env?: object[] }>; volumes?: object[] } } }).template.spec;
    pod.containers[0]!.image = 'localhost/tendril:tdl-next';
    pod.containers[0]!.env = [...(pod.containers[0]!.env ?? []), { name: 'TDL_EXTRA', value: '1' }];
    pod.volumes = (pod.volumes ?? []).slice(0, -1);
    const changedFile = join(home, 'tendril-changed.yaml');
    await writeFile(changedFile, changed.map((m) => stringifyYaml(m)).join('---\n'));
    fake.resetRequests();
    const out = await kubectlOk('apply', '--validate=false', '-f', changedFile);
    assert.match(out, /daemonset\.apps\/\S+ configured/);
    assert.equal(fake.requests()['patch:daemonsets'], 1);
    for (const m of changed) {
      const stored = fake.get(await resourceOf(m), m.metadata.namespace, m.metadata.name) as Manifest | undefined;
      assert.ok(stored, `${m.kind} ${m.metadata.name} is in the API`);
      assert.deepEqual(content(stored), content(m), `${m.kind} ${m.metadata.name} after the patch`);
    }
  });

  test('every manifest in deploy/kubernetes/*.yaml passes a client-side dry run', async () => {
    const files = yamlFiles(DEPLOY);
    assert.ok(files.length > 0, 'deploy/kubernetes/ holds manifests');
    fake.resetRequests();
    const rv = fake.resourceVersion;
    for (const file of files) {
      const expected = manifests(file);
      const out = JSON.parse(await kubectlOk('apply', '--dry-run=client', '--validate=false', '-o', 'json', '-f', file)) as Manifest & {
        items?: Manifest[];
      };
      const objects = out.kind === 'List' && out.items !== undefined ? out.items : [out];
      assert.deepEqual(
        objects.map((o) => `${o.kind} ${o.metadata.namespace ?? ''}/${o.metadata.name}`),
        expected.map((o) => `${o.kind} ${o.metadata.namespace ?? ''}/${o.metadata.name}`),
        file,
      );
    }
    // A client-side dry run writes nothing.
    assert.equal(fake.resourceVersion, rv);
    assert.equal((fake.requests().create ?? 0) + (fake.requests().patch ?? 0) + (fake.requests().update ?? 0), 0);
  });
});

describe('kubectl against the fake API server: what the API-backed cluster mode relies on', () => {
  let fake: FakeKubeApi;
  let kubeconfig: string;
  let home: string;
  const NS = 'tdl-k27';
  const { kubectlWithInput, kubectlTimed, kubectl, kubectlOk } = kubectlRunner(() => ({ kubeconfig, home }));
  const apply = (o: object): Promise<RunResult> => kubectlWithInput(JSON.stringify(o), 'apply', '--validate=false', '-f', '-');
  const applyOk = async (o: object): Promise<string> => {
    const r = await apply(o);
    assert.equal(r.code, 0, r.stderr);
    return r.stdout;
  };
  const custom = (kind: string, name: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
    apiVersion: `${TEST_CRD_GROUP}/v1`,
    kind,
    ...extra,
    metadata: { name, ...(kind === 'ClusterThing' ? {} : { namespace: NS }), ...((extra.metadata as object | undefined) ?? {}) },
  });
  const json = async <T>(...args: string[]): Promise<T> => JSON.parse(await kubectlOk(...args, '-o', 'json')) as T;
  type Obj = { metadata: { name: string; resourceVersion: string; uid: string; generation?: number; ownerReferences?: object[] }; spec?: Record<string, unknown>; status?: Record<string, unknown> };

  before(async () => {
    fake = await FakeKubeApi.start({ bookmarkIntervalMs: 200 });
    kubeconfig = await fake.kubeconfig();
    home = await mkdtemp(join(tmpdir(), 'tdl-kubectl-'));
    for (const crd of [
      testCrd({ plural: 'gadgets', kind: 'Gadget', scope: 'Namespaced', status: true }),
      testCrd({ plural: 'widgets', kind: 'Widget', scope: 'Namespaced' }),
      testCrd({ plural: 'clusterthings', kind: 'ClusterThing', scope: 'Cluster' }),
    ]) {
      await applyOk(crd);
    }
    await applyOk({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
  });
  after(async () => {
    await fake?.stop();
    if (home !== undefined) await rm(home, { recursive: true, force: true });
  });

  test('kubectl create with generateName gets a name with 5 characters of the real alphabet; name wins; a clash is AlreadyExists', async () => {
    const out = await kubectlWithInput(JSON.stringify(custom('Widget', '', { metadata: { name: undefined, generateName: 'tdl-gen-' } })), 'create', '--validate=false', '-f', '-');
    assert.equal(out.code, 0, out.stderr);
    assert.match(out.stdout, new RegExp(`^widget\\.${TEST_CRD_GROUP.replace(/\./g, '\\.')}/tdl-gen-[${NAME_ALPHABET}]{5} created\\n$`));
    const both = JSON.stringify(custom('Widget', 'tdl-named', { metadata: { generateName: 'tdl-gen-' } }));
    assert.match((await kubectlWithInput(both, 'create', '--validate=false', '-f', '-')).stdout, /widget\.\S+\/tdl-named created/);
    const again = await kubectlWithInput(both, 'create', '--validate=false', '-f', '-');
    assert.notEqual(again.code, 0);
    assert.match(again.stderr, /AlreadyExists.*widgets\.tdl\.example\.com "tdl-named" already exists/);
  });

  test('kubectl replace and patch: a stale resourceVersion is a Conflict; replace without one reads the current one first', async () => {
    await applyOk(custom('Widget', 'w', { spec: { size: 1 } }));
    const stale = await json<Obj>('get', 'widget', 'w', '-n', NS);
    await kubectlOk('patch', 'widget', 'w', '-n', NS, '--type=merge', '-p', '{"spec":{"size":2}}');
    const file = join(home, 'stale-widget.json');
    await writeFile(file, JSON.stringify({ ...stale, spec: { size: 3 } }));
    const conflict = /Operation cannot be fulfilled on widgets\.tdl\.example\.com "w": the object has been modified; please apply your changes to the latest version and try again/;
    const replaced = await kubectl('replace', '--validate=false', '-f', file);
    assert.notEqual(replaced.code, 0);
    assert.match(replaced.stderr, conflict);
    for (const [type, patch] of [
      ['merge', JSON.stringify({ metadata: { resourceVersion: stale.metadata.resourceVersion }, spec: { size: 3 } })],
      ['json', JSON.stringify([{ op: 'replace', path: '/metadata/resourceVersion', value: stale.metadata.resourceVersion }])],
    ] as const) {
      const r = await kubectl('patch', 'widget', 'w', '-n', NS, `--type=${type}`, '-p', patch);
      assert.notEqual(r.code, 0, `${type} patch with a stale resourceVersion`);
      assert.match(r.stderr, conflict);
    }
    assert.equal((await json<Obj>('get', 'widget', 'w', '-n', NS)).spec?.size, 2);
    // The server refuses a custom resource's PUT without a resourceVersion (client-node's test shows the 422);
    // kubectl replace never sends one: it reads the current resourceVersion first and puts it in.
    const { resourceVersion: _rv, ...noRv } = stale.metadata;
    await writeFile(file, JSON.stringify({ ...stale, metadata: noRv, spec: { size: 4 } }));
    fake.resetRequests();
    assert.match(await kubectlOk('replace', '--validate=false', '-f', file), /replaced/);
    assert.deepEqual([fake.requests()['get:widgets'], fake.requests()['update:widgets']], [1, 1]);
    assert.equal((await json<Obj>('get', 'widget', 'w', '-n', NS)).spec?.size, 4);
  });

  test('kubectl delete --cascade: background and foreground take the dependents, orphan leaves them without the reference', async () => {
    for (const cascade of ['background', 'foreground', 'orphan']) {
      const owner = `tdl-owner-${cascade}`;
      await applyOk(custom('Widget', owner));
      const uid = (await json<Obj>('get', 'widget', owner, '-n', NS)).metadata.uid;
      const ref = { apiVersion: `${TEST_CRD_GROUP}/v1`, kind: 'Widget', name: owner, uid, blockOwnerDeletion: true };
      for (const d of ['a', 'b']) await applyOk({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `${owner}-${d}`, namespace: NS, ownerReferences: [ref] } });
      // kubectl waits for the owner to be gone (a watch on it): with foreground, that is after its dependents.
      await kubectlOk('delete', 'widget', owner, '-n', NS, `--cascade=${cascade}`, '--timeout=20s');
      if (cascade === 'foreground') {
        assert.equal(fake.get('configmaps', NS, `${owner}-a`), undefined);
        assert.equal(fake.get('configmaps', NS, `${owner}-b`), undefined);
      }
      const deadline = Date.now() + 5000;
      let left: Obj[] = [];
      do {
        left = (await json<{ items: Obj[] }>('get', 'configmaps', '-n', NS)).items.filter((c) => c.metadata.name.startsWith(owner));
        if ((cascade === 'orphan') === (left.length === 2) && (cascade !== 'orphan' || left.every((c) => c.metadata.ownerReferences === undefined))) break;
        await new Promise((r) => setTimeout(r, 50));
      } while (Date.now() < deadline);
      if (cascade === 'orphan') {
        assert.deepEqual(left.map((c) => [c.metadata.name, c.metadata.ownerReferences]), [[`${owner}-a`, undefined], [`${owner}-b`, undefined]]);
      } else {
        assert.deepEqual(left, [], `${cascade}: the dependents are collected`);
      }
    }
  });

  test('Leases through kubectl: applied with MicroTimes, listed, a stale patch is a Conflict, a millisecond time is refused', async () => {
    const lease = {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: 'tdl-leader', namespace: NS },
      spec: { holderIdentity: 'node-a', leaseDurationSeconds: 15, acquireTime: '2026-11-29T12:00:00.000000Z', renewTime: '2026-11-29T12:00:05.123456Z', leaseTransitions: 0 },
    };
    assert.match(await applyOk(lease), /lease\.coordination\.k8s\.io\/tdl-leader created/);
    const got = await json<{ metadata: { resourceVersion: string }; spec: Record<string, unknown> }>('get', 'lease', 'tdl-leader', '-n', NS);
    assert.deepEqual(got.spec, lease.spec);
    // The fake serves no Table (kubectl's default columns come from the server): columns named here.
    assert.match(await kubectlOk('get', 'leases', '-n', NS, '--no-headers', '-o', 'custom-columns=N:.metadata.name,H:.spec.holderIdentity'), /^tdl-leader\s+node-a\n$/);
    await kubectlOk('patch', 'lease', 'tdl-leader', '-n', NS, '--type=merge', '-p', JSON.stringify({ spec: { renewTime: '2026-11-29T12:00:10.000000Z' } }));
    const stale = await kubectl('patch', 'lease', 'tdl-leader', '-n', NS, '--type=merge', '-p', JSON.stringify({ metadata: { resourceVersion: got.metadata.resourceVersion }, spec: { holderIdentity: 'node-b' } }));
    assert.notEqual(stale.code, 0);
    assert.match(stale.stderr, /Operation cannot be fulfilled on leases\.coordination\.k8s\.io "tdl-leader": the object has been modified/);
    const ms = await apply({ ...lease, metadata: { name: 'tdl-ms', namespace: NS }, spec: { ...lease.spec, renewTime: '2026-11-29T12:00:05.123Z' } });
    assert.notEqual(ms.code, 0);
    assert.match(ms.stderr, /cannot be handled as a Lease/);
    assert.equal(fake.get('leases', NS, 'tdl-ms'), undefined);
  });

  test('kubectl --subresource=status: only status changes there; the main resource ignores status', async () => {
    const out = await applyOk(custom('Gadget', 'g', { spec: { size: 1 }, status: { phase: 'Invented' } }));
    assert.match(out, /gadget\.\S+\/g created/);
    assert.equal((await json<Obj>('get', 'gadget', 'g', '-n', NS)).status, undefined);
    assert.match(await kubectlOk('patch', 'gadget', 'g', '-n', NS, '--subresource=status', '--type=merge', '-p', '{"status":{"phase":"Ready"},"spec":{"size":9}}'), /patched/);
    const afterStatus = await json<Obj>('get', 'gadget', 'g', '-n', NS, '--subresource=status');
    assert.deepEqual([afterStatus.status, afterStatus.spec, afterStatus.metadata.generation], [{ phase: 'Ready' }, { size: 1 }, 1]);
    assert.match(await kubectlOk('patch', 'gadget', 'g', '-n', NS, '--type=merge', '-p', '{"status":{"phase":"Overwritten"}}'), /patched \(no change\)/);
    await kubectlOk('patch', 'gadget', 'g', '-n', NS, '--type=merge', '-p', '{"spec":{"size":2}}');
    const afterSpec = await json<Obj>('get', 'gadget', 'g', '-n', NS);
    assert.deepEqual([afterSpec.status, afterSpec.metadata.generation], [{ phase: 'Ready' }, 2]);
    // A CRD without the subresource does not serve it.
    await applyOk(custom('Widget', 'nostatus'));
    const none = await kubectl('patch', 'widget', 'nostatus', '-n', NS, '--subresource=status', '--type=merge', '-p', '{"status":{"phase":"x"}}');
    assert.notEqual(none.code, 0);
    assert.match(none.stderr, /NotFound|could not find the requested resource/);
  });

  test('kubectl get --watch on a cluster-scoped custom resource: the list, then the changes in order', async () => {
    await applyOk(custom('ClusterThing', 't1', { spec: { size: 1 } }));
    const before = fake.openWatches;
    const watching = kubectlTimed(20_000, '', 'get', 'clusterthings', '--watch', '--output-watch-events', '-o', 'jsonpath={.type} {.object.metadata.name} {.object.spec.size}{"\\n"}');
    const deadline = Date.now() + 10_000;
    while (fake.openWatches === before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.equal(fake.openWatches, before + 1, 'kubectl watches');
    fake.create('clusterthings' as FakeResource, custom('ClusterThing', 't2', { spec: { size: 2 } }));
    fake.update('clusterthings' as FakeResource, custom('ClusterThing', 't1', { spec: { size: 10 } }));
    fake.delete('clusterthings' as FakeResource, undefined, 't2');
    await new Promise((r) => setTimeout(r, 500));
    // The server ends the watch (as its timeout would): kubectl stops.
    fake.dropWatches();
    const r = await watching;
    assert.deepEqual(r.stdout.trim().split('\n'), ['ADDED t1 1', 'ADDED t2 2', 'MODIFIED t1 10', 'DELETED t2 2']);
  });
});
