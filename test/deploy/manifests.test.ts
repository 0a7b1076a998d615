// The Kubernetes manifests in deploy/kubernetes: every document well-formed, RBAC
// exactly the requests the agent makes (src/k8s/agentApiCalls.ts) in crd mode, the
// default, and in the kvstore-etcd/ overlay, the DaemonSet's flags and paths the agent's
// own, the agent config and CNI conflist valid as the agent and libcni read them,
// the CRDs structural and field for field the tendril policy of src/policy/schema.ts,
// every example valid against its CRD (ajv) and as `tendril policy import` takes it,
// and the whole directory applied by Debian's kubectl to the fake API server.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { builtinModules } from 'node:module';
import { promisify } from 'node:util';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv, type ValidateFunction } from 'ajv';
import { pino } from 'pino';
import { parseAllDocuments } from 'yaml';
import { z } from 'zod';
import { agentCommand, configFromFile } from '../../src/agent/agentCli.js';
import { SOCKET_ENV } from '../../src/api/types.js';
import { parseEtcdOptions } from '../../src/kvstore/etcd/etcdOptions.js';
import { KVSTORE_OPTION_KEYS } from '../../src/kvstore/optionKeys.js';
import { confListFromBytes } from '../../src/libcni/conf.js';
import { parsePolicyText } from '../../src/policy/ruleParser.js';
import {
  cidrSetSchema,
  egressRuleSchema,
  ingressRuleSchema,
  labelSelectorSchema,
  portProtocolSchema,
  portRuleSchema,
  tendrilRuleSchema,
} from '../../src/policy/schema.js';
import { ENTITIES } from '../../src/policy/selector.js';
import { FakeKubeApi } from '../support/fakeKubeApi.js';
import { KubeConfig } from '@kubernetes/client-node';
import { KubernetesIdentityAllocator } from '../../src/k8s/kubernetesIdentityAllocator.js';
import { identityOfObject, tendrilIdentityObject } from '../../src/k8s/tendrilIdentity.js';
import { KubernetesNodeRegistry } from '../../src/k8s/kubernetesNodeRegistry.js';
import { endpointSpecOf, tendrilEndpointObject } from '../../src/k8s/tendrilEndpoint.js';
import { allocatedPodCidrsOfObject, nodeRecordOfObject, tendrilNodeObject, tendrilNodeSpecPatch } from '../../src/k8s/tendrilNode.js';
import type { NodeRecord } from '../../src/node/types.js';
import { LabelSet } from '../../src/labels/index.js';
import { operatorCommand, operatorConfig, type OperatorFlags } from '../../src/operator/config.js';
import { OPERATOR_API_CALLS } from '../../src/operator/operatorApi.js';
import { agentGrants } from '../../src/k8s/agentApiCalls.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const DEPLOY = join(ROOT, 'deploy/kubernetes');
const KUBECTL = '/usr/bin/kubectl';
/** The kvstore-mode overlay: kustomize patches over tendril.yaml, not objects of their own. */
const OVERLAY = 'kvstore-etcd';
const execFileAsync = promisify(execFile);

type Obj = Record<string, unknown>;
interface Doc {
  file: string;
  index: number;
  value: Obj;
}

function yamlFiles(dir: string): string[] {
  return readdirSync(dir)
    .flatMap((n) => {
      const p = join(dir, n);
      return statSync(p).isDirectory() ? yamlFiles(p) : /\.ya?ml$/.test(n) ? [p] : [];
    })
    .sort();
}

function parseDocs(text: string, file: string): Doc[] {
  const out: Doc[] = [];
  parseAllDocuments(text).forEach((d, index) => {
    assert.deepEqual(d.errors, [], `${file} document ${index} is not valid YAML`);
    const value: unknown = d.toJS();
    if (value === null) return;
    assert.ok(typeof value === 'object' && !Array.isArray(value), `${file} document ${index} is not a mapping`);
    out.push({ file, index, value: value as Obj });
  });
  return out;
}

function loadDocs(): Doc[] {
  return yamlFiles(DEPLOY)
    .filter((file) => !relative(DEPLOY, file).startsWith(`${OVERLAY}/`))
    .flatMap((file) => parseDocs(readFileSync(file, 'utf8'), relative(DEPLOY, file)));
}

const DOCS = loadDocs();

/** The kvstore-mode install as the README has it built: `kubectl kustomize` of the overlay. */
function kustomizeOverlay(): string {
  const r = spawnSync(KUBECTL, ['kustomize', '--load-restrictor=LoadRestrictionsNone', join(DEPLOY, OVERLAY)], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 0, `kubectl kustomize ${OVERLAY}: ${r.stderr}`);
  return r.stdout;
}
/** verb group/resource pairs a rule list grants. */
const grants = (rules: unknown): string[] =>
  arr(rules, 'rules').flatMap((x) => {
    const r = obj(x, 'rule');
    assert.equal(r.resourceNames, undefined);
    assert.equal(r.nonResourceURLs, undefined);
    return arr(r.apiGroups, 'apiGroups').flatMap((g) =>
      arr(r.resources, 'resources').flatMap((res) => arr(r.verbs, 'verbs').map((v) => `${String(v)} ${String(g)}/${String(res)}`)),
    );
  });
const obj = (v: unknown, what: string): Obj => {
  assert.ok(typeof v === 'object' && v !== null && !Array.isArray(v), `${what} is an object`);
  return v as Obj;
};
const arr = (v: unknown, what: string): unknown[] => {
  assert.ok(Array.isArray(v), `${what} is a list`);
  return v;
};
function one(kind: string, name?: string): Obj {
  const found = DOCS.filter((d) => d.value.kind === kind && (name === undefined || obj(d.value.metadata, 'metadata').name === name));
  assert.equal(found.length, 1, `exactly one ${kind}${name ? ` ${name}` : ''} in deploy/kubernetes`);
  return found[0]!.value;
}
const crdOf = (kind: string): Obj =>
  DOCS.map((d) => d.value).find((v) => v.kind === 'CustomResourceDefinition' && obj(obj(v.spec, 'spec').names, 'names').kind === kind)!;
const schemaOf = (crd: Obj): Obj => obj(obj(arr(obj(crd.spec, 'spec').versions, 'versions')[0], 'version').schema, 'schema').openAPIV3Schema as Obj;

describe('deploy/kubernetes manifests', () => {
  test('every document has apiVersion, kind and metadata.name; the expected objects are there', () => {
    assert.ok(DOCS.length >= 10, `found ${DOCS.length} documents`);
    for (const d of DOCS) {
      const where = `${d.file} document ${d.index}`;
      assert.equal(typeof d.value.apiVersion, 'string', `${where}: apiVersion`);
      assert.equal(typeof d.value.kind, 'string', `${where}: kind`);
      const meta = obj(d.value.metadata, `${where}: metadata`);
      assert.match(String(meta.name), /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, `${where}: metadata.name`);
    }
    const kinds = DOCS.map((d) => `${d.value.kind}/${obj(d.value.metadata, 'metadata').name}`).sort();
    for (const k of [
      'ServiceAccount/tendril',
      'ClusterRole/tendril',
      'ClusterRoleBinding/tendril',
      'Role/tendril',
      'RoleBinding/tendril',
      'ConfigMap/tendril-config',
      'DaemonSet/tendril',
      'CustomResourceDefinition/tendrilnetworkpolicies.tendril.io',
      'CustomResourceDefinition/tendrilclusterwidenetworkpolicies.tendril.io',
      'CustomResourceDefinition/tendrilidentities.tendril.io',
      'CustomResourceDefinition/tendrilendpoints.tendril.io',
      'CustomResourceDefinition/tendrilnodes.tendril.io',
      'ServiceAccount/tendril-operator',
      'ClusterRole/tendril-operator',
      'ClusterRoleBinding/tendril-operator',
      'Role/tendril-operator',
      'RoleBinding/tendril-operator',
      'Deployment/tendril-operator',
    ]) {
      assert.ok(kinds.includes(k), `${k} in ${kinds.join(', ')}`);
    }
    for (const d of DOCS.filter((x) => ['ServiceAccount', 'ConfigMap', 'DaemonSet', 'Deployment', 'Role', 'RoleBinding'].includes(String(x.value.kind)))) {
      assert.equal(obj(d.value.metadata, 'metadata').namespace, 'kube-system', `${d.file}: ${String(d.value.kind)} in kube-system`);
    }
  });

  test("the ClusterRole and the Role in the agent's namespace grant exactly the requests the agent makes in crd mode (src/k8s/agentApiCalls.ts), bound to its service account", () => {
    const role = one('ClusterRole', 'tendril');
    assert.deepEqual(grants(role.rules).sort(), agentGrants('crd', 'cluster').sort());
    const subjects = [{ kind: 'ServiceAccount', name: 'tendril', namespace: 'kube-system' }];
    const binding = one('ClusterRoleBinding', 'tendril');
    assert.deepEqual(binding.roleRef, { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'tendril' });
    assert.deepEqual(binding.subjects, subjects);
    // Leases only in the namespace the agent is told to use (agent.yaml's k8sNamespace): a Role there.
    const leases = one('Role', 'tendril');
    const k8sNamespace = obj(parseAllDocuments(String(obj(one('ConfigMap', 'tendril-config').data, 'data')['agent.yaml']))[0]!.toJS(), 'agent.yaml').k8sNamespace;
    assert.equal(obj(leases.metadata, 'metadata').namespace, k8sNamespace, "the Role is in agent.yaml's k8sNamespace");
    assert.deepEqual(grants(leases.rules).sort(), agentGrants('crd', 'namespace').sort());
    const rb = one('RoleBinding', 'tendril');
    assert.equal(obj(rb.metadata, 'metadata').namespace, k8sNamespace);
    assert.deepEqual([rb.roleRef, rb.subjects], [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'tendril' }, subjects]);
    const ds = one('DaemonSet', 'tendril');
    assert.equal(obj(obj(obj(ds.spec, 'spec').template, 'template').spec, 'pod').serviceAccountName, 'tendril');
  });

  const pod = (): Obj => obj(obj(obj(one('DaemonSet', 'tendril').spec, 'spec').template, 'template').spec, 'pod spec');
  const hostPaths = (): Map<string, string> =>
    new Map(arr(pod().volumes, 'volumes').flatMap((v) => {
      const vol = obj(v, 'volume');
      return vol.hostPath === undefined ? [] : [[String(vol.name), String(obj(vol.hostPath, 'hostPath').path)] as [string, string]];
    }));
  /** mountPath → {host path, propagation, readOnly} of a container's hostPath mounts. */
  const hostMounts = (c: Obj): Map<string, { host: string; propagation?: string; readOnly?: boolean }> => {
    const hp = hostPaths();
    return new Map(
      arr(c.volumeMounts, 'volumeMounts').flatMap((m) => {
        const mount = obj(m, 'mount');
        const host = hp.get(String(mount.name));
        if (host === undefined) return [];
        return [[String(mount.mountPath), { host, propagation: mount.mountPropagation as string | undefined, readOnly: mount.readOnly as boolean | undefined }]];
      }),
    );
  };

  test('the DaemonSet: host network, no host PID, privileged agent, every taint tolerated, node-critical, the host paths it needs', () => {
    const p = pod();
    assert.equal(p.hostNetwork, true);
    assert.equal(p.hostPID, false);
    assert.equal(p.priorityClassName, 'system-node-critical');
    assert.deepEqual(p.tolerations, [{ operator: 'Exists' }], 'one toleration that matches every taint');
    const [agent] = arr(p.containers, 'containers').map((c) => obj(c, 'container'));
    assert.equal(arr(p.containers, 'containers').length, 1);
    assert.equal(obj(agent!.securityContext, 'securityContext').privileged, true);
    const mounts = hostMounts(agent!);
    const want: Record<string, { propagation?: string; readOnly?: boolean }> = {
      '/sys/fs/bpf': { propagation: 'Bidirectional' },
      '/var/run/tendril': {},
      '/var/lib/tendril': {},
      '/var/run/netns': { propagation: 'HostToContainer' },
      '/lib/modules': { readOnly: true },
      '/opt/cni/bin': {},
      '/etc/cni/net.d': {},
    };
    for (const [path, w] of Object.entries(want)) {
      const m = mounts.get(path);
      assert.ok(m !== undefined, `agent mounts host ${path}`);
      assert.equal(m.host, path, `${path} is the host's own path`);
      if (w.propagation !== undefined) assert.equal(m.propagation, w.propagation, `${path} propagation`);
      if (w.readOnly !== undefined) assert.equal(m.readOnly, w.readOnly, `${path} read-only`);
    }
    const env = arr(agent!.env, 'env').map((e) => obj(e, 'env var'));
    assert.deepEqual(env.find((e) => e.name === 'NODE_NAME')?.valueFrom, { fieldRef: { fieldPath: 'spec.nodeName' } });
  });

  test("the agent's args are tendril-agent's own flags; the node name comes from the downward API", () => {
    const agent = obj(arr(pod().containers, 'containers')[0], 'agent');
    assert.deepEqual(agent.command, ['/opt/tendril/bin/tendril-agent']);
    const known = new Map(agentCommand().options.map((o) => [o.long!, o]));
    const args = arr(agent.args, 'args').map(String);
    const given = new Map<string, string | undefined>();
    for (const a of args) {
      const m = /^(--[a-z0-9-]+)(?:=(.*))?$/.exec(a);
      assert.ok(m !== null, `${a} is --flag or --flag=value`);
      const opt = known.get(m[1]!);
      assert.ok(opt !== undefined, `${m[1]} is a tendril-agent flag (known: ${[...known.keys()].join(' ')})`);
      assert.equal(opt.required || opt.optional ? m[2] !== undefined : m[2] === undefined, true, `${a}: a value exactly when the flag takes one`);
      if (opt.argChoices !== undefined && m[2] !== undefined) assert.ok(opt.argChoices.includes(m[2]), `${a}: one of ${opt.argChoices.join(', ')}`);
      given.set(m[1]!, m[2]);
    }
    assert.equal(given.get('--node-name'), '$(NODE_NAME)');
    assert.equal(given.get('--config'), '/etc/tendril/agent.yaml');
    // commander parses them as the agent would (the kubelet has put the node name in by then).
    const parsed = agentCommand().parse(args.map((a) => a.replace('$(NODE_NAME)', 'node-1')), { from: 'user' }).opts();
    assert.equal(parsed.nodeName, 'node-1');
    // $(VAR) references resolve only to variables the container defines.
    const defined = new Set(arr(agent.env, 'env').map((e) => String(obj(e, 'env').name)));
    for (const a of args) for (const [, v] of a.matchAll(/\$\(([A-Z_]+)\)/g)) assert.ok(defined.has(v!), `$(${v}) is defined in env`);
    // The config file comes from the ConfigMap, mounted where --config points.
    const configMount = arr(agent.volumeMounts, 'mounts').map((m) => obj(m, 'mount')).find((m) => m.mountPath === '/etc/tendril');
    const configVol = arr(pod().volumes, 'volumes').map((v) => obj(v, 'volume')).find((v) => v.name === configMount?.name);
    assert.deepEqual(configVol?.configMap, { name: 'tendril-config' });
  });

  test('the ConfigMap: agent.yaml is a valid agent configuration, the conflist valid for libcni and aimed at the agent socket', () => {
    const data = obj(one('ConfigMap', 'tendril-config').data, 'data');
    const docs = parseAllDocuments(String(data['agent.yaml']));
    assert.equal(docs.length, 1);
    const file = obj(docs[0]!.toJS(), 'agent.yaml');
    const config = configFromFile({ ...file, nodeName: 'node-1' }, 'agent.yaml');
    // No etcd: crd mode (said, not left to the default), the nodes' Leases in the DaemonSet's namespace.
    assert.equal(file.identityAllocationMode, 'crd');
    assert.equal(file.kvstore, undefined, 'no kvstore named: the embedded one, node-local state only');
    assert.equal(config.kvstore, 'embedded');
    assert.equal(config.k8sNamespace, obj(one('DaemonSet', 'tendril').metadata, 'metadata').namespace);
    assert.equal(config.ipam, 'kubernetes', 'what a kubeadm cluster (--pod-network-cidr) gives: Node spec.podCIDRs');
    assert.equal(config.routingMode, 'tunnel');
    assert.deepEqual(config.kvstoreOpts, {});

    const conflistName = Object.keys(data).find((k) => k.endsWith('.conflist'))!;
    const list = confListFromBytes(String(data[conflistName]));
    assert.equal(list.plugins[0]!.network.type, 'tendril-cni');
    assert.equal(list.plugins[0]!.raw.socket, config.socket, "tendril-cni's socket is the agent's");
    assert.equal(config.socket, '/var/run/tendril/tendril.sock');
    // The probes and the CLI in the pod use the same socket.
    const agent = obj(arr(pod().containers, 'containers')[0], 'agent');
    const probeCommand = (probe: string) => arr(obj(obj(agent[probe], probe).exec, `${probe}.exec`).command, 'command').map(String);
    for (const probe of ['startupProbe', 'readinessProbe']) {
      assert.deepEqual(probeCommand(probe), ['/opt/tendril/bin/tendril', 'status', '--socket', config.socket], probe);
    }
    // Liveness must not depend on the API server or etcd being reachable: only the agent answering.
    assert.deepEqual(probeCommand('livenessProbe'), ['/opt/tendril/bin/tendril', 'endpoint', 'list', '-o', 'json', '--socket', config.socket]);
    const env = arr(agent.env, 'env').map((e) => obj(e, 'env var'));
    assert.equal(env.find((e) => e.name === SOCKET_ENV)?.value, config.socket, `${SOCKET_ENV}: \`kubectl exec … tendril\` finds the agent`);
    const help = spawnSync(process.execPath, [join(ROOT, 'dist/bundle/tendril.js'), 'status', '--help'], { encoding: 'utf8' });
    assert.equal(help.status, 0, help.stderr);
    assert.match(help.stdout, /--socket <path>/, '`tendril status` takes --socket');

    // The init container installs exactly that file and the relay, on the host paths the runtime reads.
    const init = obj(arr(pod().initContainers, 'initContainers')[0], 'init container');
    const mounts = hostMounts(init);
    assert.equal(mounts.get('/host/opt/cni/bin')?.host, '/opt/cni/bin');
    assert.equal(mounts.get('/host/etc/cni/net.d')?.host, '/etc/cni/net.d');
    const script = arr(init.command, 'command').map(String).join(' ');
    assert.match(script, /\/opt\/tendril\/bin\/tendril-cni .*\/host\/opt\/cni\/bin\//);
    assert.match(script, new RegExp(`mv -f \\S+ /host/etc/cni/net\\.d/${conflistName.replace(/\./g, '\\.')}`));
    assert.match(script, new RegExp(`/etc/tendril/${conflistName.replace(/\./g, '\\.')}`));
  });

  test('kvstore mode (kvstore-etcd/): kubectl kustomize builds tendril.yaml with etcd in agent.yaml, RBAC read-only as the agent needs there, no Lease Role; the default has no etcd', () => {
    const built = parseDocs(kustomizeOverlay(), `${OVERLAY} (built)`).map((d) => d.value);
    const base = DOCS.filter((d) => d.file === 'tendril.yaml').map((d) => d.value);
    const ids = (docs: Obj[]) => docs.map((v) => `${String(v.kind)}/${String(obj(v.metadata, 'metadata').name)}`).sort();
    assert.deepEqual(ids(built), ids(base).filter((k) => k !== 'Role/tendril' && k !== 'RoleBinding/tendril'));
    const find = (kind: string) => built.find((v) => v.kind === kind && obj(v.metadata, 'metadata').name === (kind === 'ConfigMap' ? 'tendril-config' : 'tendril'))!;
    const file = obj(parseAllDocuments(String(obj(find('ConfigMap').data, 'data')['agent.yaml']))[0]!.toJS(), 'agent.yaml');
    const config = configFromFile({ ...file, nodeName: 'node-1' }, 'agent.yaml');
    assert.equal(config.kvstore, 'etcd');
    assert.equal(config.identityAllocationMode, 'kvstore');
    for (const k of Object.keys(config.kvstoreOpts)) assert.ok((KVSTORE_OPTION_KEYS.etcd as readonly string[]).includes(k), `kvstore option ${k} is one of etcd's`);
    parseEtcdOptions(config.kvstoreOpts, pino({ level: 'silent' }));
    assert.deepEqual(Object.keys(obj(find('ConfigMap').data, 'data')).sort(), Object.keys(obj(one('ConfigMap', 'tendril-config').data, 'data')).sort(), 'the conflist stays');
    assert.deepEqual(grants(find('ClusterRole').rules).sort(), agentGrants('kvstore', 'cluster').sort());
    assert.deepEqual(agentGrants('kvstore', 'namespace'), [], 'no namespaced requests in kvstore mode');
    // The default names no etcd anywhere: no Secret volume, no kvstore option.
    assert.equal(arr(pod().volumes, 'volumes').map((v) => obj(v, 'volume')).find((v) => v.secret !== undefined), undefined);
    assert.doesNotMatch(String(obj(one('ConfigMap', 'tendril-config').data, 'data')['agent.yaml']), /^\s*kvstore(Opt)?:/m);
  });

  test("etcd TLS (kvstore-etcd/): the optional Secret tendril-etcd-tls is mounted read-only, agent.yaml's commented options name its files, the README creates it", () => {
    const built = parseDocs(kustomizeOverlay(), `${OVERLAY} (built)`).map((d) => d.value);
    const ds = built.find((v) => v.kind === 'DaemonSet')!;
    const p = obj(obj(obj(ds.spec, 'spec').template, 'template').spec, 'pod spec');
    const vol = arr(p.volumes, 'volumes').map((v) => obj(v, 'volume')).find((v) => v.secret !== undefined);
    assert.ok(vol !== undefined, 'the DaemonSet has a Secret volume');
    const secret = obj(vol.secret, 'secret');
    assert.equal(secret.secretName, 'tendril-etcd-tls');
    assert.equal(secret.optional, true, 'optional: a cluster without etcd TLS needs no Secret');
    const agent = obj(arr(p.containers, 'containers')[0], 'agent');
    const mount = arr(agent.volumeMounts, 'mounts').map((m) => obj(m, 'mount')).find((m) => m.name === vol.name);
    assert.ok(mount !== undefined, 'the agent mounts it');
    assert.equal(mount.readOnly, true);
    const dir = String(mount.mountPath);
    // agent.yaml carries the three options, commented; uncommented they are a valid configuration.
    const text = String(obj(built.find((v) => v.kind === 'ConfigMap')!.data, 'data')['agent.yaml']);
    const commented = [...text.matchAll(/^(\s*)#\s*(etcd\.(?:trustedCAFile|certFile|keyFile)):\s*(\S+)\s*$/gm)];
    assert.deepEqual(commented.map((m) => m[2]).sort(), ['etcd.certFile', 'etcd.keyFile', 'etcd.trustedCAFile']);
    const uncommented = commented.reduce((t, m) => t.replace(m[0], `${m[1]}${m[2]}: ${m[3]}`), text);
    const config = configFromFile({ ...obj(parseAllDocuments(uncommented)[0]!.toJS(), 'agent.yaml'), nodeName: 'node-1' }, 'agent.yaml');
    const readme = readFileSync(join(DEPLOY, 'README.md'), 'utf8');
    const create = /kubectl -n kube-system create secret generic tendril-etcd-tls((?:\s+\\?\s*--from-file=\S+)+)/.exec(readme);
    assert.ok(create !== null, 'deploy/kubernetes/README.md creates the Secret');
    const keys = [...create[1]!.matchAll(/--from-file=([^=\s]+)=/g)].map((m) => m[1]!).sort();
    for (const k of ['etcd.trustedCAFile', 'etcd.certFile', 'etcd.keyFile']) {
      const file = String(config.kvstoreOpts[k]);
      assert.equal(dirname(file), dir, `${k} ${file} is in the Secret's mount ${dir}`);
      assert.ok(keys.includes(basename(file)), `${k}: the README's Secret has the key ${basename(file)} (it has ${keys.join(', ')})`);
    }
  });

  test('the cleanup DaemonSet runs `tendril-agent cleanup` on the agent\'s own host paths and removes the CNI network', () => {
    const ds = DOCS.filter((d) => d.value.kind === 'DaemonSet' && obj(d.value.metadata, 'metadata').name === 'tendril-cleanup');
    assert.equal(ds.length, 1, 'one DaemonSet tendril-cleanup');
    assert.equal(dirname(ds[0]!.file), 'cleanup', 'in a directory of its own: `kubectl apply -f deploy/kubernetes/` must not run it');
    const p = obj(obj(obj(ds[0]!.value.spec, 'spec').template, 'template').spec, 'pod spec');
    assert.equal(p.hostNetwork, true, "the node's devices, routes, nftables and the agent's node lock are in its network namespace");
    assert.deepEqual(p.tolerations, [{ operator: 'Exists' }]);
    const init = obj(arr(p.initContainers, 'initContainers')[0], 'cleanup container');
    assert.equal(obj(init.securityContext, 'securityContext').privileged, true);
    const hp = new Map(arr(p.volumes, 'volumes').map((v) => obj(v, 'volume')).flatMap((v) => (v.hostPath === undefined ? [] : [[String(v.name), String(obj(v.hostPath, 'hostPath').path)] as [string, string]])));
    const mounts = arr(init.volumeMounts, 'mounts').map((m) => obj(m, 'mount')).map((m) => ({ path: String(m.mountPath), host: hp.get(String(m.name)) }));
    /** The host path a container path reaches, through the longest mount above it. */
    const onHost = (path: string): string | undefined => {
      const m = mounts.filter((x) => path === x.path || path.startsWith(`${x.path}/`)).sort((a, b) => b.path.length - a.path.length)[0];
      return m?.host === undefined ? undefined : `${m.host}${path.slice(m.path.length)}`;
    };
    const script = String(arr(init.command, 'command').at(-1));
    const line = script.split('\n').find((l) => l.includes('tendril-agent cleanup'));
    assert.ok(line !== undefined, 'the script runs tendril-agent cleanup');
    const words = line.trim().split(/\s+/);
    assert.equal(words[0], '/opt/tendril/bin/tendril-agent');
    assert.equal(words[1], 'cleanup');
    const cleanupCmd = agentCommand().commands.find((c) => c.name() === 'cleanup')!;
    const known = new Set(cleanupCmd.options.map((o) => o.long));
    for (const w of words.slice(2).filter((x) => x.startsWith('--'))) assert.ok(known.has(w), `${w} is a flag of tendril-agent cleanup`);
    const opts = cleanupCmd.parseOptions(words.slice(2));
    assert.deepEqual(opts.unknown, []);
    const flag = (name: string) => words[words.indexOf(name) + 1]!;
    assert.ok(words.includes('--force'), 'no terminal to answer the question');
    // The agent DaemonSet's host paths, reached through the cleanup's own mounts.
    const agentHost = hostMounts(obj(arr(pod().containers, 'containers')[0], 'agent'));
    for (const [name, agentPath] of [['--state-dir', '/var/run/tendril'], ['--lib-dir', '/var/lib/tendril'], ['--bpffs-root', '/sys/fs/bpf']] as const) {
      assert.equal(onHost(flag(name)), agentHost.get(agentPath)?.host, `${name} ${flag(name)} is the agent's ${agentPath} on the host`);
    }
    // cleanup removes the state and lib dirs themselves, which it cannot do to a mount point.
    for (const name of ['--state-dir', '--lib-dir']) assert.ok(!mounts.some((m) => m.path === flag(name)), `${name} is not a mount point`);
    // The network and plugin the install container wrote go first, so the kubelet starts no pod on them.
    const rmLine = script.split('\n').findIndex((l) => /^rm -f /.test(l.trim()));
    assert.ok(rmLine >= 0 && rmLine < script.split('\n').indexOf(line), 'the CNI files go before cleanup runs');
    const removed = script.split('\n')[rmLine]!.trim().split(/\s+/).slice(2).map(onHost);
    assert.deepEqual(removed.sort(), ['/etc/cni/net.d/05-tendril.conflist', '/opt/cni/bin/tendril-cni']);
    const conflistName = Object.keys(obj(one('ConfigMap', 'tendril-config').data, 'data')).find((k) => k.endsWith('.conflist'));
    assert.equal(conflistName, '05-tendril.conflist');
    // The README's Remove section runs it.
    const readme = readFileSync(join(DEPLOY, 'README.md'), 'utf8');
    const remove = readme.slice(readme.indexOf('## Remove'));
    assert.match(remove, /kubectl apply -f deploy\/kubernetes\/cleanup\/tendril-cleanup\.yaml/);
    assert.match(remove, /tendril-agent cleanup/);
  });

  test("the image's launchers run compiled entry points it copies, and everything those import is a production dependency (the image prunes the rest)", () => {
    const text = readFileSync(join(DEPLOY, 'Containerfile'), 'utf8');
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    const prod = new Set(Object.keys(pkg.dependencies));
    assert.match(text, /npm prune --omit=dev/, 'the image keeps production dependencies only');
    const missing: string[] = [];
    const bundleMeta = JSON.parse(readFileSync(join(ROOT, 'dist/bundle/meta.json'), 'utf8')) as {
      inputs: string[];
      outputs: Record<string, { path: string; external: boolean }[]>;
    };
    for (const launcher of ['tendril', 'tendril-agent', 'tendril-operator']) {
      assert.ok(text.split('\n').some((l) => l.startsWith('COPY --from=build') && l.includes(`/src/bin/${launcher}`)), `the image has bin/${launcher}`);
      const m = /exec node "\$here\/\.\.\/(dist\/bundle\/\S+\.js)"/.exec(readFileSync(join(ROOT, 'bin', launcher), 'utf8'));
      assert.ok(m !== null, `bin/${launcher} runs a bundled entry point`);
      const entry = join(ROOT, m[1]!);
      assert.ok(statSync(entry).isFile(), `${m[1]} exists (it is under dist/bundle, which the image copies)`);
      // Every output file reachable from the entry point, through static and dynamic imports, as esbuild recorded them.
      const seen = new Set<string>();
      const queue = [relative(ROOT, entry)];
      while (queue.length > 0) {
        const file = queue.pop()!;
        if (seen.has(file)) continue;
        seen.add(file);
        const imports = bundleMeta.outputs[file];
        assert.ok(imports !== undefined, `${file} is one of the bundle's outputs`);
        for (const i of imports) {
          if (!i.external) {
            queue.push(i.path);
            continue;
          }
          if (i.path.startsWith('node:') || builtinModules.includes(i.path)) continue;
          const name = i.path.startsWith('@') ? i.path.split('/').slice(0, 2).join('/') : i.path.split('/')[0]!;
          if (!prod.has(name)) missing.push(`${file} imports ${i.path}`);
        }
      }
      assert.ok(seen.size > 3, `${launcher}: followed ${seen.size} modules`);
    }
    // The packages bundled in: each a production dependency or one of theirs (the image builds the bundles
    // before it prunes, so a development dependency bundled in would work there and still be a mistake).
    const prodClosure = new Set<string>();
    // Each as [name, directory of the package that depends on it], resolved as node resolves it: the nearest node_modules up.
    const top = join(ROOT, '.');
    const pending: [string, string][] = [...prod].map((name) => [name, top]);
    while (pending.length > 0) {
      const [name, from] = pending.pop()!;
      let dir = from;
      while (!existsSync(join(dir, 'node_modules', name, 'package.json')) && dir.length > top.length) dir = dirname(dir);
      const pkgDir = join(dir, 'node_modules', name);
      // Optional and peer dependencies nobody installed (ws's utf-8-validate) are in no bundle either.
      if (prodClosure.has(relative(ROOT, pkgDir)) || !existsSync(join(pkgDir, 'package.json'))) continue;
      prodClosure.add(relative(ROOT, pkgDir));
      const meta = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8')) as Record<string, Record<string, string> | undefined>;
      for (const dep of Object.keys({ ...meta.dependencies, ...meta.optionalDependencies, ...meta.peerDependencies })) pending.push([dep, pkgDir]);
    }
    assert.ok(bundleMeta.inputs.some((f) => f.startsWith('dist/src/agent/')), 'meta.json lists the bundled inputs');
    for (const f of bundleMeta.inputs) {
      const m = /^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(f);
      if (m && !prodClosure.has(m[1]!)) missing.push(`the bundles hold ${f}`);
    }
    assert.deepEqual(missing, [], 'imports of packages that are not production dependencies');
  });

  test('the Containerfile copies what the agent needs at run time and starts tendril-agent', () => {
    const text = readFileSync(join(DEPLOY, 'Containerfile'), 'utf8');
    const lines = text.split('\n').filter((l) => !l.startsWith('#'));
    assert.ok(lines.filter((l) => /^FROM /.test(l)).every((l) => /^FROM docker\.io\/library\/debian:/.test(l)), 'Debian images only');
    for (const path of ['package.json', 'node_modules', 'dist/bundle', 'dist/api', 'dist/ui', 'api/openapi.yaml', 'build/native/tendril_kernel.node', 'bin/tendril-cni']) {
      assert.ok(lines.some((l) => l.startsWith('COPY --from=build') && l.includes(`/src/${path}`)), `copies ${path}`);
    }
    for (const o of ['bpf_lxc.o', 'bpf_host.o', 'bpf_netdev.o', 'bpf_overlay.o', 'bpf_gc.o']) {
      assert.ok(readdirSync(join(ROOT, 'bpf')).includes(o.replace(/\.o$/, '.c')), `${o} is one of the datapath's objects`);
      assert.ok(lines.some((l) => l.startsWith('COPY --from=bpf') && l.includes(`/src/build/bpf/${o}`)), `copies ${o} from the clang 14 stage`);
    }
    assert.equal(readdirSync(join(ROOT, 'bpf')).filter((f) => f.endsWith('.c')).length, 5, 'every datapath object is copied');
    assert.match(text, /^ENTRYPOINT \["\/opt\/tendril\/bin\/tendril-agent"\]$/m);
    // The operator's Deployment runs the same image with its own launcher.
    assert.ok(lines.some((l) => l.startsWith('COPY bin/') && l.includes('bin/tendril-operator')), 'the build stage has bin/tendril-operator');
    assert.ok(lines.some((l) => l.startsWith('COPY --from=build') && l.includes('/src/bin/tendril-operator')), 'copies bin/tendril-operator');
    // The paths the manifests use exist in the image.
    assert.match(text, /^WORKDIR \/opt\/tendril$/m);
  });
});

// ---- tendril-operator -------------------------------------------------------------

describe('deploy/kubernetes/tendril-operator.yaml', () => {
  const wanted = (scope: 'cluster' | 'namespace'): string[] =>
    OPERATOR_API_CALLS.filter((c) => c.scope === scope).flatMap((c) => c.verbs.map((v) => `${v} ${c.group}/${c.resource}`));

  test('RBAC grants exactly the requests the operator makes (src/operator/operatorApi.ts): cluster-wide in a ClusterRole, Leases in a kube-system Role', () => {
    assert.deepEqual(grants(one('ClusterRole', 'tendril-operator').rules).sort(), wanted('cluster').sort());
    const role = one('Role', 'tendril-operator');
    assert.equal(obj(role.metadata, 'metadata').namespace, 'kube-system');
    assert.deepEqual(grants(role.rules).sort(), wanted('namespace').sort());
    const subjects = [{ kind: 'ServiceAccount', name: 'tendril-operator', namespace: 'kube-system' }];
    const crb = one('ClusterRoleBinding', 'tendril-operator');
    assert.deepEqual([crb.roleRef, crb.subjects], [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'tendril-operator' }, subjects]);
    const rb = one('RoleBinding', 'tendril-operator');
    assert.deepEqual([rb.roleRef, rb.subjects], [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'tendril-operator' }, subjects]);
  });

  test('one replica of the agent\'s image running tendril-operator with its own flags; probes on /healthz where --health-addr serves it', () => {
    const deploy = one('Deployment', 'tendril-operator');
    const spec = obj(deploy.spec, 'spec');
    assert.equal(spec.replicas, 1);
    const template = obj(spec.template, 'template');
    assert.deepEqual(obj(spec.selector, 'selector').matchLabels, { 'app.kubernetes.io/name': obj(obj(template.metadata, 'metadata').labels, 'labels')['app.kubernetes.io/name'] });
    const p = obj(template.spec, 'pod spec');
    assert.equal(p.serviceAccountName, 'tendril-operator');
    assert.equal(p.hostNetwork, true, 'pods get addresses only after the operator ran: it cannot need one');
    const containers = arr(p.containers, 'containers').map((c) => obj(c, 'container'));
    assert.equal(containers.length, 1);
    const c = containers[0]!;
    const agentPod = obj(obj(obj(one('DaemonSet', 'tendril').spec, 'spec').template, 'template').spec, 'pod spec');
    const agentImage = obj(arr(agentPod.containers, 'containers')[0], 'agent').image;
    assert.equal(c.image, agentImage, 'the agent\'s image');
    assert.deepEqual(c.command, ['/opt/tendril/bin/tendril-operator']);
    const env = new Map(arr(c.env, 'env').map((e) => [String(obj(e, 'env').name), obj(e, 'env')]));
    const args = arr(c.args, 'args').map(String);
    for (const a of args) for (const [, v] of a.matchAll(/\$\(([A-Z_]+)\)/g)) assert.ok(env.has(v!), `$(${v}) is defined in env`);
    assert.deepEqual(env.get('POD_NAMESPACE')?.valueFrom, { fieldRef: { fieldPath: 'metadata.namespace' } });
    // The args are tendril-operator's flags and make a valid configuration (the kubelet has expanded the variables).
    const expanded = args.map((a) => a.replace('$(POD_NAMESPACE)', 'kube-system').replace('$(POD_NAME)', 'tendril-operator-abc12'));
    const flags = operatorCommand().parse(expanded, { from: 'user' }).opts<OperatorFlags>();
    const config = operatorConfig(flags);
    assert.equal(config.namespace, 'kube-system');
    assert.equal(config.id, 'tendril-operator-abc12');
    const [host, port] = [config.healthAddr.slice(0, config.healthAddr.lastIndexOf(':')), Number(config.healthAddr.split(':').pop())];
    for (const probe of ['readinessProbe', 'livenessProbe']) {
      const get = obj(obj(c[probe], probe).httpGet, `${probe}.httpGet`);
      assert.deepEqual([get.path, get.port, get.host], ['/healthz', port, host], probe);
    }
    // The commented cluster-pool flags, uncommented, are valid too.
    const text = readFileSync(join(DEPLOY, 'tendril-operator.yaml'), 'utf8');
    const commented = [...text.matchAll(/^\s*#\s*- (--cluster-pool-[a-z0-9-]+=\S+)\s*$/gm)].map((m) => m[1]!);
    assert.ok(commented.length >= 2, 'cluster-pool flags shown');
    const pools = operatorConfig(operatorCommand().parse([...expanded, ...commented], { from: 'user' }).opts<OperatorFlags>());
    assert.ok(pools.clusterPoolCidrs.length > 0);
  });
});

// ---- CRDs ---------------------------------------------------------------------

/** Problems that make a CRD schema non-structural, by JSON path. */
function structuralProblems(node: unknown, path: string, out: string[], root = true): void {
  if (typeof node !== 'object' || node === null) {
    out.push(`${path}: not a schema`);
    return;
  }
  const s = node as Obj;
  const intOrString = s['x-kubernetes-int-or-string'] === true;
  const preserve = s['x-kubernetes-preserve-unknown-fields'] === true;
  if (typeof s.type !== 'string' && !intOrString) out.push(`${path}: no type`);
  if (s.type === 'object' && s.properties === undefined && s.additionalProperties === undefined && !preserve) {
    out.push(`${path}: an object with neither properties, additionalProperties nor x-kubernetes-preserve-unknown-fields`);
  }
  if (s.type === 'object' && s.properties !== undefined && s.additionalProperties !== undefined) out.push(`${path}: properties and additionalProperties together`);
  if (s.type === 'array' && s.items === undefined) out.push(`${path}: an array without items`);
  for (const k of ['allOf', 'anyOf', 'oneOf', 'not']) {
    const branches = s[k] === undefined ? [] : k === 'not' ? [s[k]] : (s[k] as unknown[]);
    for (const b of branches) {
      for (const banned of ['type', 'description', 'default', 'additionalProperties', 'nullable', 'properties', 'items']) {
        if (typeof b === 'object' && b !== null && banned in b) out.push(`${path}.${k}: ${banned} inside a logical junctor`);
      }
    }
  }
  for (const [name, child] of Object.entries((s.properties as Obj | undefined) ?? {})) {
    if (root && name === 'metadata') {
      const m = child as Obj;
      if (m.type !== 'object' || Object.keys(m).some((k) => k !== 'type')) out.push(`${path}.metadata: only {type: object} is allowed at the root`);
      continue;
    }
    structuralProblems(child, `${path}.properties.${name}`, out, false);
  }
  if (typeof s.additionalProperties === 'object') structuralProblems(s.additionalProperties, `${path}.additionalProperties`, out, false);
  if (s.items !== undefined) structuralProblems(s.items, `${path}.items`, out, false);
}

/** A zod object schema's field names, looking through optional and array wrappers. */
function zodFields(schema: z.ZodType): string[] {
  const s = unwrap(schema);
  assert.ok(s instanceof z.ZodObject, 'a zod object schema');
  return Object.keys(s.shape).sort();
}
function unwrap(schema: z.ZodType): z.ZodType {
  let s: z.ZodType = schema;
  for (;;) {
    if (s instanceof z.ZodOptional) s = s.unwrap() as z.ZodType;
    else if (s instanceof z.ZodArray) s = s.element as z.ZodType;
    else return s;
  }
}
const props = (s: Obj, ...path: string[]): Obj => {
  let cur = s;
  for (const p of path) {
    const next = obj(obj(cur.properties, `properties at ${p}`)[p], p);
    cur = next.type === 'array' ? obj(next.items, `${p}.items`) : next;
  }
  return cur;
};
const keysOf = (s: Obj): string[] => Object.keys(obj(s.properties, 'properties')).sort();

function crdAjv(): Ajv {
  const ajv = new Ajv({ allErrors: true });
  ajv.addKeyword({
    keyword: 'x-kubernetes-int-or-string',
    schemaType: 'boolean',
    validate: (on: boolean, data: unknown) => !on || typeof data === 'string' || Number.isInteger(data),
  });
  ajv.addKeyword({ keyword: 'x-kubernetes-preserve-unknown-fields', schemaType: 'boolean' });
  return ajv;
}

describe('tendril CRDs', () => {
  const cases = [
    { kind: 'TendrilNetworkPolicy', plural: 'tendrilnetworkpolicies', scope: 'Namespaced', short: 'tnp' },
    { kind: 'TendrilClusterwideNetworkPolicy', plural: 'tendrilclusterwidenetworkpolicies', scope: 'Cluster', short: 'tcnp' },
  ];
  for (const c of cases) {
    test(`${c.kind}: apiextensions.k8s.io/v1, tendril.io/v1 served and stored, ${c.scope}, short name ${c.short}, structural schema`, () => {
      const crd = crdOf(c.kind);
      assert.ok(crd !== undefined, `a CRD for ${c.kind}`);
      assert.equal(crd.apiVersion, 'apiextensions.k8s.io/v1');
      assert.equal(obj(crd.metadata, 'metadata').name, `${c.plural}.tendril.io`);
      const spec = obj(crd.spec, 'spec');
      assert.equal(spec.group, 'tendril.io');
      assert.equal(spec.scope, c.scope);
      const names = obj(spec.names, 'names');
      assert.equal(names.plural, c.plural);
      assert.equal(names.listKind, `${c.kind}List`);
      assert.deepEqual(names.shortNames, [c.short]);
      const versions = arr(spec.versions, 'versions').map((v) => obj(v, 'version'));
      assert.deepEqual(versions.map((v) => [v.name, v.served, v.storage]), [['v1', true, true]]);
      const problems: string[] = [];
      structuralProblems(schemaOf(crd), 'openAPIV3Schema', problems);
      assert.deepEqual(problems, []);
    });

    test(`${c.kind}: the schema has exactly the fields of src/policy/schema.ts`, () => {
      const root = schemaOf(crdOf(c.kind));
      assert.deepEqual(keysOf(root), ['apiVersion', 'kind', 'metadata', 'spec', 'specs']);
      assert.deepEqual(props(root, 'specs'), props(root, 'spec'), 'spec and specs[] are the same rule');
      const rule = props(root, 'spec');
      assert.deepEqual(keysOf(rule), zodFields(tendrilRuleSchema));
      assert.deepEqual(rule.required, ['endpointSelector']);
      assert.deepEqual(keysOf(props(rule, 'endpointSelector')), zodFields(labelSelectorSchema));
      assert.deepEqual(keysOf(props(rule, 'endpointSelector', 'matchExpressions')), zodFields(labelSelectorSchema.shape.matchExpressions));
      assert.deepEqual(keysOf(props(rule, 'enableDefaultDeny')), zodFields(tendrilRuleSchema.shape.enableDefaultDeny));
      for (const [field, zodRule, dir] of [
        ['ingress', ingressRuleSchema, 'from'],
        ['ingressDeny', ingressRuleSchema, 'from'],
        ['egress', egressRuleSchema, 'to'],
        ['egressDeny', egressRuleSchema, 'to'],
      ] as const) {
        const r = props(rule, field);
        assert.deepEqual(keysOf(r), zodFields(zodRule), field);
        assert.deepEqual(obj(props(r, `${dir}Entities`), 'entity').enum, [...ENTITIES], `${field}.${dir}Entities`);
        assert.deepEqual(keysOf(props(r, `${dir}CIDRSet`)), zodFields(cidrSetSchema));
        assert.deepEqual(keysOf(props(r, `${dir}Endpoints`)), zodFields(labelSelectorSchema));
        assert.deepEqual(keysOf(props(r, 'toPorts')), zodFields(portRuleSchema));
        const port = props(r, 'toPorts', 'ports');
        assert.deepEqual(keysOf(port), zodFields(portProtocolSchema));
        assert.deepEqual(obj(props(port, 'protocol'), 'protocol').enum, (unwrap(portProtocolSchema.shape.protocol) as z.ZodEnum).options);
      }
    });
  }

  test('TendrilIdentity: cluster-scoped, tendril.io/v1, short name tid, structural; what the agent writes validates and reads back', () => {
    const crd = crdOf('TendrilIdentity');
    assert.ok(crd !== undefined, 'a CRD for TendrilIdentity');
    assert.equal(obj(crd.metadata, 'metadata').name, 'tendrilidentities.tendril.io');
    const spec = obj(crd.spec, 'spec');
    assert.equal(spec.group, 'tendril.io');
    assert.equal(spec.scope, 'Cluster');
    const names = obj(spec.names, 'names');
    assert.deepEqual([names.plural, names.listKind, names.shortNames], ['tendrilidentities', 'TendrilIdentityList', ['tid']]);
    assert.deepEqual(arr(spec.versions, 'versions').map((v) => [obj(v, 'v').name, obj(v, 'v').served, obj(v, 'v').storage]), [['v1', true, true]]);
    const root = schemaOf(crd);
    const problems: string[] = [];
    structuralProblems(root, 'openAPIV3Schema', problems);
    assert.deepEqual(problems, []);
    const labels = LabelSet.parse(['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=shop', 'container:build=1']);
    const written = tendrilIdentityObject(300, labels);
    assert.deepEqual(keysOf(root), Object.keys(written).filter((k) => k !== 'metadata').concat('metadata').sort());
    const validate = crdAjv().compile(root);
    assert.ok(validate(written), JSON.stringify(validate.errors));
    const read = identityOfObject(written);
    assert.ok(typeof read !== 'string' && read.id === 300 && read.labels.equals(labels));
  });

  test('TendrilEndpoint: namespaced, tendril.io/v1, short name tep, structural; what the agent writes validates and reads back; the schema refuses what the reader would', () => {
    const crd = crdOf('TendrilEndpoint');
    assert.ok(crd !== undefined, 'a CRD for TendrilEndpoint');
    assert.equal(obj(crd.metadata, 'metadata').name, 'tendrilendpoints.tendril.io');
    const spec = obj(crd.spec, 'spec');
    assert.equal(spec.group, 'tendril.io');
    assert.equal(spec.scope, 'Namespaced');
    const names = obj(spec.names, 'names');
    assert.deepEqual([names.plural, names.listKind, names.shortNames, names.categories], ['tendrilendpoints', 'TendrilEndpointList', ['tep'], ['tendril']]);
    assert.deepEqual(arr(spec.versions, 'versions').map((v) => [obj(v, 'v').name, obj(v, 'v').served, obj(v, 'v').storage]), [['v1', true, true]]);
    const root = schemaOf(crd);
    const problems: string[] = [];
    structuralProblems(root, 'openAPIV3Schema', problems);
    assert.deepEqual(problems, []);
    const ep = { id: 7, podNamespace: 'shop', podName: 'web-5d8f7', podUid: '0b7c3a56-5a0e-4d4c-9d1e-3f1e2a4b5c6d', identity: 300, addresses: ['10.0.1.7', 'fd00:1::7'] };
    const node = { name: 'node-a', nodeIP: '192.168.0.1', nodeIP6: 'fd00:168::1' };
    const written = tendrilEndpointObject(ep, node);
    assert.deepEqual(keysOf(root), Object.keys(written).filter((k) => k !== 'metadata').concat('metadata').sort());
    assert.deepEqual(keysOf(props(root, 'spec')), Object.keys(written.spec).sort(), 'the schema has exactly the fields the agent writes');
    const validate = crdAjv().compile(root);
    assert.ok(validate(written), JSON.stringify(validate.errors));
    assert.deepEqual(endpointSpecOf(written), written.spec);
    assert.ok(validate(tendrilEndpointObject({ ...ep, identity: 5 }, node)), 'reserved:init, a pod whose labels are not known yet');
    for (const bad of [
      { ...written.spec, identity: 70000 },
      { ...written.spec, identity: 1 },
      { ...written.spec, addresses: [] },
      { node: 'node-a', nodeIP: '192.168.0.1', identity: 300, addresses: ['10.0.1.7'] },
    ]) {
      assert.equal(validate({ ...written, spec: bad }), false, `ajv refuses ${JSON.stringify(bad)}`);
      assert.equal(typeof endpointSpecOf({ spec: bad }), 'string', `the reader refuses ${JSON.stringify(bad)}`);
    }
  });

  test('TendrilNode: cluster-scoped, tendril.io/v1, short name tn, structural; what the agent writes and the operator adds validates and reads back', () => {
    const crd = crdOf('TendrilNode');
    assert.ok(crd !== undefined, 'a CRD for TendrilNode');
    assert.equal(obj(crd.metadata, 'metadata').name, 'tendrilnodes.tendril.io');
    const spec = obj(crd.spec, 'spec');
    assert.equal(spec.group, 'tendril.io');
    assert.equal(spec.scope, 'Cluster');
    const names = obj(spec.names, 'names');
    assert.deepEqual([names.plural, names.listKind, names.shortNames, names.categories], ['tendrilnodes', 'TendrilNodeList', ['tn'], ['tendril']]);
    assert.deepEqual(arr(spec.versions, 'versions').map((v) => [obj(v, 'v').name, obj(v, 'v').served, obj(v, 'v').storage]), [['v1', true, true]]);
    const root = schemaOf(crd);
    const problems: string[] = [];
    structuralProblems(root, 'openAPIV3Schema', problems);
    assert.deepEqual(problems, []);
    const validate = crdAjv().compile(root);
    const record: NodeRecord = {
      name: 'node-a',
      addresses: [
        { type: 'InternalIP', ip: '192.168.50.1' },
        { type: 'InternalIP', ip: 'fd00:50::1' },
        { type: 'ExternalIP', ip: '203.0.113.1' },
        { type: 'RouterIP', ip: '10.200.1.1' },
      ],
      podCidrs: ['10.200.1.0/24', 'fd00:200:1::/64'],
      routingMode: 'tunnel',
      tunnel: { protocol: 'vxlan', port: 8472 },
      health: { status: 'degraded', reason: 'kvstore embedded disconnected' },
      startedAt: '2026-11-29T10:00:00.000Z',
      flows: { address: '192.168.50.1:4244', tls: true },
    };
    const written = tendrilNodeObject(record, { apiVersion: 'v1', kind: 'Node', name: 'node-a', uid: '6a1c0d2e-0000-4000-8000-000000000001' });
    // Every field the agent writes is declared (the server would prune an undeclared one).
    assert.deepEqual(keysOf(props(root, 'spec')), [...Object.keys(written.spec), 'ipam'].sort());
    assert.deepEqual(keysOf(props(root, 'spec', 'addresses')), ['ip', 'type']);
    assert.deepEqual(obj(props(root, 'spec', 'addresses', 'type'), 'type').enum, ['InternalIP', 'ExternalIP', 'RouterIP']);
    assert.ok(validate(written), JSON.stringify(validate.errors));
    // The agent's merge patch applied to an object the operator gave CIDRs: valid, ipam kept.
    const withIpam = { ...written, spec: { ...written.spec, ipam: { podCIDRs: ['10.244.1.0/24', 'fd00:244:1::/64'] } } };
    assert.ok(validate(withIpam), JSON.stringify(validate.errors));
    assert.deepEqual(nodeRecordOfObject(withIpam), record);
    assert.deepEqual(allocatedPodCidrsOfObject(withIpam), ['10.244.1.0/24', 'fd00:244:1::/64']);
    const native = tendrilNodeSpecPatch({ ...record, routingMode: 'native', tunnel: undefined, health: { status: 'ok' } });
    assert.equal(native.spec.tunnel, null, 'the patch removes the tunnel');
    assert.equal(obj(native.spec.health, 'health').reason, null, 'and the old reason');
    assert.equal(native.spec.ipam, undefined, 'and never names ipam');
    // The schema has teeth where the record's rules are a schema's to say.
    assert.equal(validate({ ...written, spec: { ...written.spec, routingMode: 'bgp' } }), false);
    assert.equal(validate({ ...written, spec: { ...written.spec, tunnel: { protocol: 'geneve', port: 6081 } } }), false);
    assert.equal(validate({ ...written, spec: { ...written.spec, addresses: [{ type: 'Hostname', ip: 'a' }] } }), false);
  });

  test('every example is valid against its CRD (ajv) and as `tendril policy import` reads it', () => {
    const ajv = crdAjv();
    const validators = new Map<string, ValidateFunction>(cases.map((c) => [c.kind, ajv.compile(schemaOf(crdOf(c.kind)))]));
    // A CiliumNetworkPolicy tendril accepts is a valid TendrilNetworkPolicy body too (the same shape).
    const schemaKind: Record<string, string> = {
      TendrilNetworkPolicy: 'TendrilNetworkPolicy',
      TendrilClusterwideNetworkPolicy: 'TendrilClusterwideNetworkPolicy',
      CiliumNetworkPolicy: 'TendrilNetworkPolicy',
      CiliumClusterwideNetworkPolicy: 'TendrilClusterwideNetworkPolicy',
    };
    const examples = DOCS.filter((d) => d.file.startsWith('examples/'));
    assert.deepEqual([...new Set(examples.map((d) => d.value.kind))].sort(), ['CiliumNetworkPolicy', 'TendrilClusterwideNetworkPolicy', 'TendrilNetworkPolicy']);
    for (const d of examples) {
      const validate = validators.get(schemaKind[String(d.value.kind)]!)!;
      assert.ok(validate(d.value), `${d.file}: ${ajv.errorsText(validate.errors)}`);
      const policies = parsePolicyText(readFileSync(join(DEPLOY, d.file), 'utf8'));
      assert.equal(policies.length, 1, d.file);
      assert.equal(policies[0]!.name.name, obj(d.value.metadata, 'metadata').name);
      assert.equal(policies[0]!.name.namespace === '', String(d.value.kind).includes('Clusterwide'), `${d.file}: scope`);
    }
    // The schema has teeth: what the parser refuses, ajv refuses too.
    const tnp = validators.get('TendrilNetworkPolicy')!;
    const base = { apiVersion: 'tendril.io/v1', kind: 'TendrilNetworkPolicy', metadata: { name: 'x' } };
    for (const bad of [
      { ...base },
      { ...base, spec: {} },
      { ...base, spec: { endpointSelector: {}, ingress: [{ fromEntities: ['everything'] }] } },
      { ...base, spec: { endpointSelector: {}, egress: [{ toPorts: [{ ports: [{ port: 53, protocol: 'ICMP' }] }] }] } },
      { ...base, spec: { endpointSelector: {}, egress: [{ toPorts: [{ ports: [] }] }] } },
      { ...base, spec: { endpointSelector: { matchExpressions: [{ key: 'a', operator: 'Near' }] } } },
      { ...base, spec: { endpointSelector: {}, egress: [{ toPorts: [{ ports: [{ port: true }] }] }] } },
    ]) {
      assert.equal(tnp(bad), false, `ajv refuses ${JSON.stringify(bad)}`);
      assert.throws(() => parsePolicyText(JSON.stringify(bad)), `the parser refuses ${JSON.stringify(bad)}`);
    }
    assert.ok(tnp({ ...base, spec: { endpointSelector: {}, egress: [{ toPorts: [{ ports: [{ port: 53 }, { port: 'dns' }] }] }] } }), 'port: int or string');
  });
});

// ---- kubectl against the fake API server ---------------------------------------

describe('kubectl applies deploy/kubernetes', () => {
  let api: FakeKubeApi;
  let kubeconfig: string;
  before(async () => {
    api = await FakeKubeApi.start();
    // Every cluster has kube-system, where tendril.yaml goes.
    api.create('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'kube-system' } });
    kubeconfig = await api.kubeconfig();
  });
  after(async () => {
    await api.stop();
  });
  // Asynchronous: the fake API server answers from this process's event loop.
  const kubectl = async (...args: string[]): Promise<string> => {
    try {
      const r = await execFileAsync(KUBECTL, ['--kubeconfig', kubeconfig, ...args], { encoding: 'utf8', timeout: 60_000 });
      return r.stdout;
    } catch (err) {
      const e = err as { code?: unknown; stderr?: string; stdout?: string };
      assert.fail(`kubectl ${args.join(' ')} failed (${String(e.code)}): ${e.stderr ?? ''}${e.stdout ?? ''}`);
    }
  };

  test('the CRDs, then tendril.yaml, then the tendril examples; the objects are served back', async () => {
    // --validate=false: the fake serves no OpenAPI document (kubectl would fetch it to validate).
    await kubectl('apply', '--validate=false', '-f', join(DEPLOY, 'crds'));
    assert.ok(api.get('customresourcedefinitions', undefined, 'tendrilnetworkpolicies.tendril.io') !== undefined);
    const out = await kubectl('apply', '--validate=false', '-f', join(DEPLOY, 'tendril.yaml'));
    for (const o of [
      'serviceaccount/tendril',
      'clusterrole.rbac.authorization.k8s.io/tendril',
      'clusterrolebinding.rbac.authorization.k8s.io/tendril',
      'role.rbac.authorization.k8s.io/tendril',
      'rolebinding.rbac.authorization.k8s.io/tendril',
      'configmap/tendril-config',
      'daemonset.apps/tendril',
    ]) {
      assert.match(out, new RegExp(`${o.replace(/\./g, '\\.')} created`));
    }
    const ds = api.get('daemonsets', 'kube-system', 'tendril') as Obj;
    assert.equal(obj(obj(obj(ds.spec, 'spec').template, 'template').spec, 'pod').hostNetwork, true);
    // The example's namespace (kubectl create would send protobuf, which the fake does not speak).
    api.create('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'demo' } });
    await kubectl('apply', '--validate=false', '-f', join(DEPLOY, 'examples/tendrilnetworkpolicy.yaml'), '-f', join(DEPLOY, 'examples/tendrilclusterwidenetworkpolicy.yaml'));
    assert.equal((await kubectl('get', 'tnp', '-n', 'demo', '-o', 'name')).trim(), 'tendrilnetworkpolicy.tendril.io/backend');
    assert.equal((await kubectl('get', 'tcnp', '-o', 'name')).trim(), 'tendrilclusterwidenetworkpolicy.tendril.io/cluster-baseline');
    const stored = api.get('tendrilnetworkpolicies', 'demo', 'backend') as Obj;
    const example = DOCS.find((d) => d.file === 'examples/tendrilnetworkpolicy.yaml')!.value;
    assert.deepEqual(stored.spec, example.spec, 'the spec arrives unchanged');
    // What the API server hands the agent is what `tendril policy import` takes.
    assert.equal(parsePolicyText(JSON.stringify(stored)).length, 1);
    // Applying again changes nothing.
    assert.match(await kubectl('apply', '--validate=false', '-f', join(DEPLOY, 'tendril.yaml')), /daemonset\.apps\/tendril unchanged/);
  });

  test('a TendrilIdentity an agent allocates is found with kubectl by short name and label selector', async () => {
    await kubectl('apply', '--validate=false', '-f', join(DEPLOY, 'crds'));
    const kc = new KubeConfig();
    kc.loadFromFile(kubeconfig);
    const allocator = new KubernetesIdentityAllocator({ kubeConfig: kc, nodeName: 'node-a', logger: pino({ level: 'silent' }) });
    try {
      await allocator.start();
      const labels = LabelSet.parse(['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=demo']);
      const { identity } = await allocator.allocate(labels);
      assert.equal((await kubectl('get', 'tid', '-l', 'app=web,io.kubernetes.pod.namespace=demo', '-o', 'name')).trim(), `tendrilidentity.tendril.io/${identity.id}`);
      const got = JSON.parse(await kubectl('get', 'tendrilidentities', String(identity.id), '-o', 'json')) as Obj;
      assert.deepEqual(got['security-labels'], { 'k8s:app': 'web', 'k8s:io.kubernetes.pod.namespace': 'demo' });
    } finally {
      await allocator.close();
    }
  });

  test('a TendrilNode an agent publishes is found with kubectl by short name, its Lease by label', async () => {
    await kubectl('apply', '--validate=false', '-f', join(DEPLOY, 'crds'));
    const kc = new KubeConfig();
    kc.loadFromFile(kubeconfig);
    const registry = new KubernetesNodeRegistry({ kubeConfig: kc, nodeName: 'node-a', namespace: 'kube-system', logger: pino({ level: 'silent' }) });
    try {
      await registry.start({
        name: 'node-a',
        addresses: [{ type: 'InternalIP', ip: '192.168.50.1' }],
        podCidrs: ['10.200.1.0/24'],
        routingMode: 'native',
        health: { status: 'ok' },
        startedAt: new Date().toISOString(),
      });
      assert.equal((await kubectl('get', 'tn', '-o', 'name')).trim(), 'tendrilnode.tendril.io/node-a');
      const got = JSON.parse(await kubectl('get', 'tendrilnodes', 'node-a', '-o', 'json')) as Obj;
      assert.deepEqual(obj(got.spec, 'spec').podCIDRs, ['10.200.1.0/24']);
      assert.equal((await kubectl('get', 'leases', '-n', 'kube-system', '-l', 'tendril.io/node-lease=true', '-o', 'name')).trim(), 'lease.coordination.k8s.io/tendril-node-node-a');
    } finally {
      await registry.stop();
    }
  });

  test('tendril-operator.yaml applies: its RBAC, Role and Deployment are served back', async () => {
    const out = await kubectl('apply', '--validate=false', '-f', join(DEPLOY, 'tendril-operator.yaml'));
    for (const o of [
      'serviceaccount/tendril-operator',
      'clusterrole.rbac.authorization.k8s.io/tendril-operator',
      'clusterrolebinding.rbac.authorization.k8s.io/tendril-operator',
      'role.rbac.authorization.k8s.io/tendril-operator',
      'rolebinding.rbac.authorization.k8s.io/tendril-operator',
      'deployment.apps/tendril-operator',
    ]) {
      assert.match(out, new RegExp(`${o.replace(/\./g, '\\.')} created`));
    }
    const d = api.get('deployments', 'kube-system', 'tendril-operator') as Obj;
    assert.equal(obj(d.spec, 'spec').replicas, 1);
    assert.match(await kubectl('apply', '--validate=false', '-f', join(DEPLOY, 'tendril-operator.yaml')), /deployment\.apps\/tendril-operator unchanged/);
  });

  test('the removal: tendril.yaml deleted, then the cleanup DaemonSet applied', async () => {
    await kubectl('apply', '--validate=false', '-f', join(DEPLOY, 'tendril.yaml'));
    assert.match(await kubectl('delete', '-f', join(DEPLOY, 'tendril.yaml')), /daemonset\.apps "tendril" deleted/);
    assert.match(await kubectl('apply', '--validate=false', '-f', join(DEPLOY, 'cleanup/tendril-cleanup.yaml')), /daemonset\.apps\/tendril-cleanup created/);
    const ds = api.get('daemonsets', 'kube-system', 'tendril-cleanup') as Obj;
    assert.equal(obj(obj(obj(ds.spec, 'spec').template, 'template').spec, 'pod').hostPID, true);
  });

  test('kvstore mode: the kvstore-etcd overlay, built by kubectl kustomize, applies on a cluster without tendril; no Lease Role', async () => {
    // After the removal above: a cluster without tendril.yaml's objects (moving between the modes is not supported).
    assert.equal(api.get('daemonsets', 'kube-system', 'tendril'), undefined);
    const dir = mkdtempSync(join(tmpdir(), 'tdl-kvstore-etcd-'));
    try {
      const file = join(dir, 'tendril-kvstore-etcd.yaml');
      writeFileSync(file, kustomizeOverlay());
      const out = await kubectl('apply', '--validate=false', '-f', file);
      assert.match(out, /daemonset\.apps\/tendril created/);
      assert.doesNotMatch(out, /^role\.rbac\.authorization\.k8s\.io\/tendril /m);
      const cm = api.get('configmaps', 'kube-system', 'tendril-config') as Obj;
      assert.match(String(obj(cm.data, 'data')['agent.yaml']), /^kvstore: etcd$/m);
      const ds = api.get('daemonsets', 'kube-system', 'tendril') as Obj;
      const volumes = arr(obj(obj(obj(ds.spec, 'spec').template, 'template').spec, 'pod').volumes, 'volumes').map((v) => obj(v, 'volume'));
      assert.ok(volumes.some((v) => v.name === 'etcd-tls'), 'the etcd TLS Secret volume');
      assert.doesNotMatch(await kubectl('get', 'roles', '-n', 'kube-system', '-o', 'name'), /^role\.rbac\.authorization\.k8s\.io\/tendril$/m);
      assert.match(await kubectl('delete', '-f', file), /daemonset\.apps "tendril" deleted/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
