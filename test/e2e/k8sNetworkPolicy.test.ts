// Policies from the Kubernetes API (the fake API server on loopback) enforced
// on real packets between pod namespaces by an agent with the eBPF datapath:
// a NetworkPolicy created in the API denies within a measured time and allows
// again once deleted; an update in the API changes enforcement; namespaceSelector
// follows the namespaces' labels (a namespace relabelled in the API moves its
// pods in or out); a pod relabelled in the API moves in or out of a rule's
// podSelector; a TendrilNetworkPolicy and a TendrilClusterwideNetworkPolicy
// object do the same as `tendril policy import` of them.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { requireRoot } from '../support/root.js';
import { k8sSceneHooks, type K8sPod, networkPolicyObject, policyNames, tendrilClusterwidePolicyObject, tendrilPolicyObject } from '../support/k8sScene.js';

requireRoot('the Kubernetes NetworkPolicy tests');

const PROD = 'tdl-np-prod';
const DEV = 'tdl-np-dev';
const TCP_PORT = 8080;
/** A change in the API must be enforced within this. */
const ENFORCE_MS = 10_000;
/** A denied SYN is dropped: no answer within this is a denial; an allowed connection answers in a few ms. */
const PROBE_MS = 300;

let db: K8sPod;
let web: K8sPod;
let devWeb: K8sPod;

const scene = k8sSceneHooks('k8n', { nodeName: 'tdl-node-k8n', podCidr: '10.244.0.0/24', namespaces: { [PROD]: { env: 'prod' }, [DEV]: { env: 'dev' } }, tcpPorts: [TCP_PORT] }, async (s) => {
  db = await s.addPod({ name: 'db', namespace: PROD, labels: { app: 'db' } });
  web = await s.addPod({ name: 'web', namespace: PROD, labels: { app: 'web' } });
  // Same labels as web, another namespace.
  devWeb = await s.addPod({ name: 'web', namespace: DEV, labels: { app: 'web' } });
});

type Verdict = 'allowed' | 'denied';

/** One new TCP connection from `from` to db: answered, or dropped (no answer; a reset or refusal fails the test). */
async function probe(from: K8sPod, to: K8sPod = db): Promise<Verdict> {
  const r = await scene().agent(from.key).tcpOnce({ dst: to.ip, port: TCP_PORT }, PROBE_MS);
  if (r.outcome === 'open') return 'allowed';
  if (r.outcome === 'timeout') return 'denied';
  throw new Error(`${from.key} -> ${to.key}: ${r.outcome} ${r.detail ?? ''}`);
}

/** A new connection is started every this often while waiting for a change: the resolution of the times measured. */
const PROBE_EVERY_MS = 25;

/**
 * Starts a new connection to db every PROBE_EVERY_MS (each waits PROBE_MS
 * for its answer) until one gets `want`; the ms from `since` to the start of
 * that connection (its SYN met the datapath then).
 */
function untilVerdict(from: K8sPod, want: Verdict, since: number, what: string, to: K8sPod = db): Promise<number> {
  return new Promise((resolve, reject) => {
    let done = false;
    const finish = (f: () => void) => {
      if (done) return;
      done = true;
      f();
    };
    const launch = () => {
      if (done) return;
      if (Date.now() - since > ENFORCE_MS) {
        void policyNames(scene().node).then(
          (names) => finish(() => reject(new Error(`${what}: ${from.key} -> ${to.key} not ${want} ${ENFORCE_MS} ms after the change; the agent holds policies ${JSON.stringify(names)}`))),
          (err: Error) => finish(() => reject(err)),
        );
        return;
      }
      const at = Date.now();
      probe(from, to).then(
        (v) => {
          if (v === want) finish(() => resolve(at - since));
        },
        (err: Error) => finish(() => reject(err)),
      );
      setTimeout(launch, PROBE_EVERY_MS);
    };
    launch();
  });
}

async function assertVerdicts(want: Record<string, Verdict>, what: string): Promise<void> {
  const pods: Record<string, K8sPod> = { web, devWeb };
  const got: Record<string, Verdict> = {};
  for (const k of Object.keys(want)) got[k] = await probe(pods[k]!);
  assert.deepEqual(got, want, what);
}

async function untilPolicyGone(name: string): Promise<void> {
  const deadline = Date.now() + ENFORCE_MS;
  while ((await policyNames(scene().node)).includes(name)) {
    if (Date.now() > deadline) throw new Error(`policy ${name} still held ${ENFORCE_MS} ms after its deletion`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('no policy: everyone reaches db', async () => {
  await assertVerdicts({ web: 'allowed', devWeb: 'allowed' }, 'baseline');
});

describe('a NetworkPolicy from the API', () => {
  const name = 'db-from-web';
  const spec = { podSelector: { matchLabels: { app: 'db' } }, policyTypes: ['Ingress'], ingress: [{ from: [{ podSelector: { matchLabels: { app: 'web' } } }], ports: [{ protocol: 'TCP', port: TCP_PORT }] }] };

  test('created: enforced on packets (time to the first denied connection measured), same-namespace web still allowed', async (t) => {
    const created = Date.now();
    scene().fake.create('networkpolicies', networkPolicyObject(PROD, name, spec));
    const deniedAfter = await untilVerdict(devWeb, 'denied', created, 'NetworkPolicy created');
    t.diagnostic(`NetworkPolicy created in the API -> first denied connection: ${deniedAfter} ms (a new connection every ${PROBE_EVERY_MS} ms)`);
    assert.ok((await policyNames(scene().node)).includes(`NetworkPolicy/${PROD}/${name}`), 'held under its kind/namespace/name');
    await assertVerdicts({ web: 'allowed', devWeb: 'denied' }, 'the podSelector of a NetworkPolicy peer selects pods of the policy\'s namespace only');
  });

  test('a pod relabelled in the API moves out of and back into the rule\'s podSelector', async (t) => {
    const changed = Date.now();
    scene().setPodLabels(web, { app: 'web-v2' });
    t.diagnostic(`pod relabelled out of the peer selector -> denied in ${await untilVerdict(web, 'denied', changed, 'web relabelled')} ms`);
    const back = Date.now();
    scene().setPodLabels(web, { app: 'web' });
    t.diagnostic(`relabelled back -> allowed in ${await untilVerdict(web, 'allowed', back, 'web relabelled back')} ms`);
  });

  test('updated in the API (the peer becomes namespaceSelector env=dev): enforcement follows', async (t) => {
    const now = scene().fake.get('networkpolicies', PROD, name) as { metadata: object };
    const updated = Date.now();
    scene().fake.update('networkpolicies', { ...now, spec: { ...spec, ingress: [{ from: [{ namespaceSelector: { matchLabels: { env: 'dev' } } }] }] } });
    t.diagnostic(`NetworkPolicy updated -> dev's web allowed in ${await untilVerdict(devWeb, 'allowed', updated, 'policy updated')} ms`);
    await assertVerdicts({ web: 'denied', devWeb: 'allowed' }, 'namespaceSelector env=dev: only dev\'s pods');
  });

  test('namespaceSelector follows the namespaces\' labels in the API', async (t) => {
    const relabelled = Date.now();
    scene().setNamespaceLabels(DEV, { env: 'staging' });
    t.diagnostic(`namespace relabelled env=staging -> its pod denied in ${await untilVerdict(devWeb, 'denied', relabelled, 'dev relabelled')} ms`);
    const prodJoins = Date.now();
    scene().setNamespaceLabels(PROD, { env: 'dev' });
    t.diagnostic(`prod relabelled env=dev -> its web allowed in ${await untilVerdict(web, 'allowed', prodJoins, 'prod relabelled env=dev')} ms`);
    scene().setNamespaceLabels(PROD, { env: 'prod' });
    scene().setNamespaceLabels(DEV, { env: 'dev' });
    await untilVerdict(devWeb, 'allowed', Date.now(), 'labels restored');
    await untilVerdict(web, 'denied', Date.now(), 'labels restored');
  });

  test('deleted from the API: allowed again', async (t) => {
    const deleted = Date.now();
    scene().fake.delete('networkpolicies', PROD, name);
    t.diagnostic(`NetworkPolicy deleted -> first allowed connection: ${await untilVerdict(web, 'allowed', deleted, 'NetworkPolicy deleted')} ms`);
    await untilPolicyGone(`NetworkPolicy/${PROD}/${name}`);
    await assertVerdicts({ web: 'allowed', devWeb: 'allowed' }, 'no policy left');
  });
});

describe('tendril policy CRD objects from the API', () => {
  test('a TendrilNetworkPolicy: fromEndpoints selects its own namespace\'s pods; deleted, allowed again', async (t) => {
    const name = 'db-tnp';
    const created = Date.now();
    scene().fake.create('tendrilnetworkpolicies', tendrilPolicyObject(PROD, name, { endpointSelector: { matchLabels: { app: 'db' } }, ingress: [{ fromEndpoints: [{ matchLabels: { app: 'web' } }], toPorts: [{ ports: [{ port: String(TCP_PORT), protocol: 'TCP' }] }] }] }));
    t.diagnostic(`TendrilNetworkPolicy created -> first denied connection: ${await untilVerdict(devWeb, 'denied', created, 'TendrilNetworkPolicy created')} ms`);
    assert.ok((await policyNames(scene().node)).includes(`TendrilNetworkPolicy/${PROD}/${name}`), JSON.stringify(await policyNames(scene().node)));
    await assertVerdicts({ web: 'allowed', devWeb: 'denied' }, 'TendrilNetworkPolicy');
    const deleted = Date.now();
    scene().fake.delete('tendrilnetworkpolicies', PROD, name);
    await untilVerdict(devWeb, 'allowed', deleted, 'TendrilNetworkPolicy deleted');
    await untilPolicyGone(`TendrilNetworkPolicy/${PROD}/${name}`);
  });

  test('a TendrilClusterwideNetworkPolicy: an ingressDeny of the dev namespace\'s pods, cluster-wide', async (t) => {
    const name = 'tdl-deny-dev';
    const created = Date.now();
    scene().fake.create(
      'tendrilclusterwidenetworkpolicies',
      tendrilClusterwidePolicyObject(name, {
        endpointSelector: { matchLabels: { app: 'db' } },
        ingress: [{ fromEntities: ['all'] }],
        ingressDeny: [{ fromEndpoints: [{ matchLabels: { 'k8s:io.kubernetes.pod.namespace': DEV } }] }],
      }),
    );
    t.diagnostic(`TendrilClusterwideNetworkPolicy created -> first denied connection: ${await untilVerdict(devWeb, 'denied', created, 'cluster-wide policy created')} ms`);
    assert.ok((await policyNames(scene().node)).includes(`TendrilClusterwideNetworkPolicy/${name}`), JSON.stringify(await policyNames(scene().node)));
    await assertVerdicts({ web: 'allowed', devWeb: 'denied' }, 'cluster-wide deny of dev');
    const deleted = Date.now();
    scene().fake.delete('tendrilclusterwidenetworkpolicies', undefined, name);
    await untilVerdict(devWeb, 'allowed', deleted, 'cluster-wide policy deleted');
  });
});
