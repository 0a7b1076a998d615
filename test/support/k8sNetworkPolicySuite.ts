// Policies from the Kubernetes API (the fake API server on loopback) enforced
// on real packets between pod namespaces by an agent with the eBPF datapath:
// a NetworkPolicy created in the API denies within a measured time and allows
// again once deleted; an update in the API changes enforcement; namespaceSelector
// follows the namespaces' labels (a namespace relabelled in the API moves its
// pods in or out); a pod relabelled in the API moves in or out of a rule's
// podSelector; a TendrilNetworkPolicy and a TendrilClusterwideNetworkPolicy
// object do the same as `tendril policy import` of them; an ipBlock with
// `except` admits an outside address inside the block and not one inside the
// except; a /0 of one IP version admits nothing of the other (cilium#22610).
// One suite for every address family (family.ts; wrappers
// test/e2e/k8sNetworkPolicy*.test.ts): every probe is made on each IP version
// the pods have, and the versions must agree.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { allOf, cidrIn, type Family, familyName, type IpFamily, ipIn, versionsOf } from './family.js';
import { requireRoot } from './root.js';
import { k8sSceneHooks, type K8sPod, networkPolicyObject, OUTSIDE_CLIENT_IP, policyNames, tendrilClusterwidePolicyObject, tendrilPolicyObject } from './k8sScene.js';
import { runOk } from './run.js';

/** The suite on one family; `tag` keeps the namespaces of concurrent runs apart. */
export function k8sNetworkPolicySuite(family: Family, tag: string): void {
  requireRoot('the Kubernetes NetworkPolicy tests');
  const versions = versionsOf(family);

  const PROD = 'tdl-np-prod';
  const DEV = 'tdl-np-dev';
  const TCP_PORT = 8080;
  /** A change in the API must be enforced within this. */
  const ENFORCE_MS = 10_000;
  /** A denied SYN is dropped: no answer within this is a denial; an allowed connection answers in a few ms. */
  const PROBE_MS = 300;

  /** IPv4 templates of the outside host's two addresses (the first is the scene's, the second the suite adds): in the ipBlock below, and in its except. */
  const OUT_IN = OUTSIDE_CLIENT_IP;
  const OUT_EX = '10.199.0.200';
  const BLOCK = '10.199.0.0/24';
  const BLOCK_EXCEPT = '10.199.0.128/25';

  let db: K8sPod;
  let web: K8sPod;
  let devWeb: K8sPod;

  const scene = k8sSceneHooks(tag, { nodeName: `tdl-node-k8n-${familyName(family)}`, family, podCidr: '10.244.0.0/24', namespaces: { [PROD]: { env: 'prod' }, [DEV]: { env: 'dev' } }, tcpPorts: [TCP_PORT], outside: true }, async (s) => {
    db = await s.addPod({ name: 'db', namespace: PROD, labels: { app: 'db' } });
    web = await s.addPod({ name: 'web', namespace: PROD, labels: { app: 'web' } });
    // Same labels as web, another namespace.
    devWeb = await s.addPod({ name: 'web', namespace: DEV, labels: { app: 'web' } });
    // The outside host's second address, in the ipBlock's except (nodad: usable at once).
    for (const v of versions) await runOk(['ip', '-n', s.outside!.netns, 'addr', 'add', `${ipIn(v, OUT_EX)}/${v === 4 ? 24 : 120}`, 'nodad', 'dev', 'eth0']);
    // No policy yet: the outside host reaches db once its link is usable (IPv6 neighbour discovery waits for the
    // link-local address's duplicate address detection), so the first verdicts measure policy, not link set-up.
    for (const v of versions) {
      for (const src of [OUT_IN, OUT_EX]) {
        const deadline = Date.now() + 10_000;
        while ((await s.agent('outside').tcpOnce({ dst: db.addresses[v]!, port: TCP_PORT, src: ipIn(v, src) }, 500)).outcome !== 'open') {
          if (Date.now() > deadline) throw new Error(`the outside host (${ipIn(v, src)}) does not reach db on IPv${v} without any policy`);
        }
      }
    }
  });

  type Verdict = 'allowed' | 'denied';
  /** Probes on the IP versions disagreed: `mixed: 4=allowed 6=denied`. */
  type Outcome = Verdict | `mixed: ${string}`;

  /** A client: a pod, or the outside host from one of its addresses (an IPv4 template). */
  type Client = K8sPod | { key: 'outside'; src: string };

  /** One new TCP connection from `from` to `to` on IP version v: answered, or dropped (no answer; a reset or refusal fails the test). */
  async function probeOn(v: IpFamily, from: Client, to: K8sPod): Promise<Verdict> {
    const src = 'src' in from ? ipIn(v, from.src) : undefined;
    const r = await scene().agent(from.key).tcpOnce({ dst: to.addresses[v]!, port: TCP_PORT, ...(src ? { src } : {}) }, PROBE_MS);
    if (r.outcome === 'open') return 'allowed';
    if (r.outcome === 'timeout') return 'denied';
    throw new Error(`${from.key}${src ? ` from ${src}` : ''} -> ${to.key} on IPv${v}: ${r.outcome} ${r.detail ?? ''}`);
  }

  /** The verdict on every IP version of the family, which must agree (else `mixed`). */
  async function probe(from: Client, to: K8sPod = db): Promise<Outcome> {
    const got = await Promise.all(versions.map((v) => probeOn(v, from, to)));
    return got.every((g) => g === got[0]) ? got[0]! : `mixed: ${versions.map((v, i) => `${v}=${got[i]}`).join(' ')}`;
  }

  /** A new connection is started every this often while waiting for a change: the resolution of the times measured. */
  const PROBE_EVERY_MS = 25;

  /**
   * Starts a new connection to db every PROBE_EVERY_MS (each waits PROBE_MS
   * for its answer) until one gets `want`; the ms from `since` to the start of
   * that connection (its SYN met the datapath then).
   */
  function untilVerdict(from: Client, want: Verdict, since: number, what: string, to: K8sPod = db): Promise<number> {
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

  async function assertVerdicts(want: Record<string, Outcome>, what: string): Promise<void> {
    const clients: Record<string, Client> = { web, devWeb, outIn: { key: 'outside', src: OUT_IN }, outEx: { key: 'outside', src: OUT_EX } };
    const got: Record<string, Outcome> = {};
    for (const k of Object.keys(want)) got[k] = await probe(clients[k]!);
    assert.deepEqual(got, want, what);
  }

  async function untilPolicyGone(name: string): Promise<void> {
    const deadline = Date.now() + ENFORCE_MS;
    while ((await policyNames(scene().node)).includes(name)) {
      if (Date.now() > deadline) throw new Error(`policy ${name} still held ${ENFORCE_MS} ms after its deletion`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  test(`no policy: everyone reaches db (${familyName(family)})`, async () => {
    await assertVerdicts({ web: 'allowed', devWeb: 'allowed', outIn: 'allowed', outEx: 'allowed' }, 'baseline');
  });

  describe(`a NetworkPolicy from the API (${familyName(family)})`, () => {
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

  describe(`ipBlock from the API (${familyName(family)})`, () => {
    test('an ipBlock with except in each IP version: the outside address inside the block is admitted, the one in the except and the pods are not', async (t) => {
      const name = 'db-from-block';
      const spec = { podSelector: { matchLabels: { app: 'db' } }, policyTypes: ['Ingress'], ingress: [{ from: versions.map((v) => ({ ipBlock: { cidr: cidrIn(v, BLOCK), except: [cidrIn(v, BLOCK_EXCEPT)] } })) }] };
      const created = Date.now();
      scene().fake.create('networkpolicies', networkPolicyObject(PROD, name, spec));
      t.diagnostic(`ipBlock NetworkPolicy created -> web denied in ${await untilVerdict(web, 'denied', created, 'ipBlock policy created')} ms`);
      await assertVerdicts({ web: 'denied', devWeb: 'denied', outIn: 'allowed', outEx: 'denied' }, 'ipBlock with except');
      const deleted = Date.now();
      scene().fake.delete('networkpolicies', PROD, name);
      await untilVerdict(web, 'allowed', deleted, 'ipBlock policy deleted');
      await untilPolicyGone(`NetworkPolicy/${PROD}/${name}`);
    });

    test('a /0 of one IP version admits nothing of the other (cilium#22610)', async (t) => {
      // On IPv6 and dual-stack pods 0.0.0.0/0; on IPv4 pods ::/0.
      const only: IpFamily = versions.includes(6) ? 4 : 6;
      const name = `db-from-all-ipv${only}`;
      const spec = { podSelector: { matchLabels: { app: 'db' } }, policyTypes: ['Ingress'], ingress: [{ from: [{ ipBlock: { cidr: allOf(only) } }] }] };
      const created = Date.now();
      scene().fake.create('networkpolicies', networkPolicyObject(PROD, name, spec));
      t.diagnostic(`${allOf(only)} NetworkPolicy created -> web denied in ${await untilVerdict(web, 'denied', created, `${allOf(only)} policy created`)} ms`);
      const outside: Client = { key: 'outside', src: OUT_IN };
      const got = Object.fromEntries(await Promise.all(versions.map(async (v) => [`IPv${v}`, await probeOn(v, outside, db)] as const)));
      const want = Object.fromEntries(versions.map((v) => [`IPv${v}`, v === only ? 'allowed' : 'denied']));
      assert.deepEqual(got, want, `an ipBlock ${allOf(only)} admits the outside on IPv${only} only`);
      const deleted = Date.now();
      scene().fake.delete('networkpolicies', PROD, name);
      await untilVerdict(web, 'allowed', deleted, `${allOf(only)} policy deleted`);
      await untilPolicyGone(`NetworkPolicy/${PROD}/${name}`);
    });
  });

  describe(`tendril policy CRD objects from the API (${familyName(family)})`, () => {
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
}
