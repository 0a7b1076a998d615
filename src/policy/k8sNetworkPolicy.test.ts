// Table-driven Kubernetes NetworkPolicy semantics. Every expectation is
// checked twice: through the map states built from diffs (the datapath's
// view) and through the rules (trace).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { TestWorld, type Peer } from './testing/world.js';
import { Proto } from './types.js';

interface Cluster {
  w: TestWorld;
  peers: Record<string, Peer>;
}

function cluster(): Cluster {
  const w = new TestWorld();
  const prod = { team: 'a', env: 'prod' };
  const dev = { team: 'b', env: 'dev' };
  const peers: Record<string, Peer> = {
    'prod/web': w.pod('prod/web', { app: 'web' }, { namespaceLabels: prod }),
    'prod/db': w.pod('prod/db', { app: 'db' }, { namespaceLabels: prod, namedPorts: [{ name: 'pg', port: 5432, protocol: 'TCP' }] }),
    'prod/cache': w.pod('prod/cache', { app: 'cache', tier: 'backend' }, { namespaceLabels: prod }),
    'dev/web': w.pod('dev/web', { app: 'web' }, { namespaceLabels: dev }),
    'dev/db': w.pod('dev/db', { app: 'db' }, { namespaceLabels: dev }),
    host: w.host,
  };
  return { w, peers };
}

type Flow = [src: string, dst: string, port: number | `${number}/udp`, verdict: 'allow' | 'deny'];

interface Case {
  name: string;
  policies: string;
  flows: Flow[];
  /** Outside addresses used in flows as `ip:1.2.3.4`. */
}

const NP = (name: string, ns: string, spec: string) => `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: ${name}, namespace: ${ns}}
spec:
${spec
  .split('\n')
  .map((l) => `  ${l}`)
  .join('\n')}
---
`;

const cases: Case[] = [
  {
    name: 'no policy: everything allowed',
    policies: '',
    flows: [
      ['prod/web', 'prod/db', 5432, 'allow'],
      ['dev/web', 'prod/db', 22, 'allow'],
      ['ip:8.8.8.8', 'prod/web', 80, 'allow'],
      ['prod/web', 'ip:8.8.8.8', 443, 'allow'],
    ],
  },
  {
    name: 'default deny ingress in a namespace (empty podSelector, policyTypes Ingress)',
    policies: NP('deny', 'prod', 'podSelector: {}\npolicyTypes: [Ingress]'),
    flows: [
      ['prod/web', 'prod/db', 5432, 'deny'],
      ['dev/web', 'prod/web', 80, 'deny'],
      ['ip:8.8.8.8', 'prod/web', 80, 'deny'],
      // egress not isolated; other namespace untouched
      ['prod/web', 'dev/db', 5432, 'allow'],
      ['dev/web', 'dev/db', 5432, 'allow'],
      // the host may always reach its pods (allow-localhost)
      ['host', 'prod/db', 5432, 'allow'],
    ],
  },
  {
    name: 'ingress: [] without policyTypes isolates ingress only',
    policies: NP('deny', 'prod', 'podSelector: {}\ningress: []'),
    flows: [
      ['dev/web', 'prod/web', 80, 'deny'],
      ['prod/web', 'ip:8.8.8.8', 443, 'allow'],
    ],
  },
  {
    name: 'allow-all ingress: one empty rule',
    policies: NP('all', 'prod', 'podSelector: {}\ningress:\n- {}'),
    flows: [
      ['dev/web', 'prod/db', 1234, 'allow'],
      ['ip:8.8.8.8', 'prod/db', 1234, 'allow'],
      ['dev/web', 'prod/db', 53, 'allow'],
    ],
  },
  {
    name: 'default deny egress only when declared',
    policies: NP('deny-egress', 'prod', 'podSelector: {}\npolicyTypes: [Egress]'),
    flows: [
      ['prod/web', 'prod/db', 5432, 'deny'],
      ['prod/web', 'ip:8.8.8.8', 443, 'deny'],
      ['dev/web', 'prod/db', 5432, 'allow'],
    ],
  },
  {
    name: 'egress rules without policyTypes isolate egress too',
    policies: NP('egress', 'prod', 'podSelector: {matchLabels: {app: web}}\negress:\n- to: [{podSelector: {matchLabels: {app: db}}}]'),
    flows: [
      ['prod/web', 'prod/db', 5432, 'allow'],
      ['prod/web', 'prod/cache', 6379, 'deny'],
      ['prod/web', 'ip:8.8.8.8', 53, 'deny'],
      // without policyTypes every policy also isolates ingress (Kubernetes defaulting)
      ['dev/web', 'prod/web', 80, 'deny'],
    ],
  },
  {
    name: 'policyTypes [Egress]: ingress stays open',
    policies: NP('egress', 'prod', 'podSelector: {matchLabels: {app: web}}\npolicyTypes: [Egress]\negress:\n- to: [{podSelector: {matchLabels: {app: db}}}]'),
    flows: [
      ['prod/web', 'prod/db', 5432, 'allow'],
      ['prod/web', 'prod/cache', 6379, 'deny'],
      ['dev/web', 'prod/web', 80, 'allow'],
    ],
  },
  {
    name: 'policyTypes [Ingress] ignores egress rules',
    policies: NP('ing', 'prod', 'podSelector: {matchLabels: {app: web}}\npolicyTypes: [Ingress]\negress:\n- to: [{podSelector: {matchLabels: {app: db}}}]'),
    flows: [
      ['prod/web', 'prod/cache', 6379, 'allow'],
      ['prod/db', 'prod/web', 80, 'deny'],
    ],
  },
  {
    name: 'podSelector peer: same namespace only',
    policies: NP('db', 'prod', 'podSelector: {matchLabels: {app: db}}\ningress:\n- from: [{podSelector: {matchLabels: {app: web}}}]'),
    flows: [
      ['prod/web', 'prod/db', 5432, 'allow'],
      ['dev/web', 'prod/db', 5432, 'deny'],
      ['prod/cache', 'prod/db', 5432, 'deny'],
      // not selected: unaffected
      ['dev/web', 'prod/web', 80, 'allow'],
    ],
  },
  {
    name: 'namespaceSelector peer: every pod of matching namespaces',
    policies: NP('db', 'prod', 'podSelector: {matchLabels: {app: db}}\ningress:\n- from: [{namespaceSelector: {matchLabels: {team: b}}}]'),
    flows: [
      ['dev/web', 'prod/db', 5432, 'allow'],
      ['dev/db', 'prod/db', 5432, 'allow'],
      ['prod/web', 'prod/db', 5432, 'deny'],
      ['ip:8.8.8.8', 'prod/db', 5432, 'deny'],
      ['host', 'prod/db', 5432, 'allow'],
    ],
  },
  {
    name: 'empty namespaceSelector: pods of all namespaces, not the outside',
    policies: NP('db', 'prod', 'podSelector: {matchLabels: {app: db}}\ningress:\n- from: [{namespaceSelector: {}}]'),
    flows: [
      ['dev/web', 'prod/db', 5432, 'allow'],
      ['prod/web', 'prod/db', 5432, 'allow'],
      ['ip:8.8.8.8', 'prod/db', 5432, 'deny'],
    ],
  },
  {
    name: 'podSelector AND namespaceSelector in one peer',
    policies: NP(
      'db',
      'prod',
      'podSelector: {matchLabels: {app: db}}\ningress:\n- from:\n  - namespaceSelector: {matchLabels: {team: b}}\n    podSelector: {matchLabels: {app: web}}',
    ),
    flows: [
      ['dev/web', 'prod/db', 5432, 'allow'],
      ['dev/db', 'prod/db', 5432, 'deny'],
      ['prod/web', 'prod/db', 5432, 'deny'],
    ],
  },
  {
    name: 'podSelector OR namespaceSelector as two peers',
    policies: NP(
      'db',
      'prod',
      'podSelector: {matchLabels: {app: db}}\ningress:\n- from:\n  - namespaceSelector: {matchLabels: {team: b}}\n  - podSelector: {matchLabels: {app: web}}',
    ),
    flows: [
      ['dev/web', 'prod/db', 5432, 'allow'],
      ['dev/db', 'prod/db', 5432, 'allow'],
      ['prod/web', 'prod/db', 5432, 'allow'],
      ['prod/cache', 'prod/db', 5432, 'deny'],
    ],
  },
  {
    name: 'matchExpressions in selectors',
    policies: NP(
      'db',
      'prod',
      'podSelector: {matchExpressions: [{key: app, operator: In, values: [db, cache]}]}\ningress:\n- from: [{podSelector: {matchExpressions: [{key: tier, operator: DoesNotExist}, {key: app, operator: NotIn, values: [db]}]}}]',
    ),
    flows: [
      ['prod/web', 'prod/db', 1, 'allow'],
      ['prod/cache', 'prod/db', 1, 'deny'],
      ['prod/db', 'prod/cache', 1, 'deny'],
      ['prod/web', 'prod/cache', 1, 'allow'],
    ],
  },
  {
    name: 'ipBlock with except',
    policies: NP('web', 'prod', 'podSelector: {matchLabels: {app: web}}\ningress:\n- from: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16]}}]'),
    flows: [
      ['ip:10.2.3.4', 'prod/web', 80, 'allow'],
      ['ip:10.1.2.3', 'prod/web', 80, 'deny'],
      ['ip:8.8.8.8', 'prod/web', 80, 'deny'],
      ['prod/db', 'prod/web', 80, 'deny'],
    ],
  },
  {
    name: 'egress ipBlock 0.0.0.0/0 except a range',
    policies: NP('web', 'prod', 'podSelector: {matchLabels: {app: web}}\negress:\n- to: [{ipBlock: {cidr: 0.0.0.0/0, except: [192.168.0.0/16]}}]'),
    flows: [
      ['prod/web', 'ip:8.8.8.8', 443, 'allow'],
      ['prod/web', 'ip:192.168.1.1', 443, 'deny'],
      ['prod/web', 'prod/db', 5432, 'deny'],
    ],
  },
  {
    name: 'ports: protocol defaults to TCP; UDP separately',
    policies: NP('db', 'prod', 'podSelector: {matchLabels: {app: db}}\ningress:\n- ports: [{port: 5432}, {protocol: UDP, port: 53}]'),
    flows: [
      ['dev/web', 'prod/db', 5432, 'allow'],
      ['dev/web', 'prod/db', '5432/udp', 'deny'],
      ['dev/web', 'prod/db', '53/udp', 'allow'],
      ['dev/web', 'prod/db', 53, 'deny'],
      ['ip:8.8.8.8', 'prod/db', 5432, 'allow'],
    ],
  },
  {
    name: 'port range with endPort',
    policies: NP('db', 'prod', 'podSelector: {matchLabels: {app: db}}\ningress:\n- from: [{podSelector: {}}]\n  ports: [{port: 32000, endPort: 32768}]'),
    flows: [
      ['prod/web', 'prod/db', 31999, 'deny'],
      ['prod/web', 'prod/db', 32000, 'allow'],
      ['prod/web', 'prod/db', 32500, 'allow'],
      ['prod/web', 'prod/db', 32768, 'allow'],
      ['prod/web', 'prod/db', 32769, 'deny'],
    ],
  },
  {
    name: 'protocol without port: every port of it',
    policies: NP('db', 'prod', 'podSelector: {matchLabels: {app: db}}\ningress:\n- ports: [{protocol: UDP}]'),
    flows: [
      ['prod/web', 'prod/db', '1/udp', 'allow'],
      ['prod/web', 'prod/db', '65535/udp', 'allow'],
      ['prod/web', 'prod/db', 80, 'deny'],
    ],
  },
  {
    name: 'named port resolved against the destination pod',
    policies: NP('db', 'prod', 'podSelector: {matchLabels: {app: db}}\ningress:\n- ports: [{port: pg}]'),
    flows: [
      ['prod/web', 'prod/db', 5432, 'allow'],
      ['prod/web', 'prod/db', 5433, 'deny'],
    ],
  },
  {
    name: 'named port the pod does not declare matches nothing',
    policies: NP('web', 'prod', 'podSelector: {matchLabels: {app: web}}\ningress:\n- ports: [{port: pg}]'),
    flows: [['prod/db', 'prod/web', 5432, 'deny']],
  },
  {
    name: 'egress named port resolved against the peers',
    policies: NP('web', 'prod', 'podSelector: {matchLabels: {app: web}}\negress:\n- ports: [{port: pg}]'),
    flows: [
      ['prod/web', 'prod/db', 5432, 'allow'],
      ['prod/web', 'prod/db', 80, 'deny'],
    ],
  },
  {
    name: 'several policies add up (union of allows)',
    policies:
      NP('a', 'prod', 'podSelector: {matchLabels: {app: db}}\ningress:\n- from: [{podSelector: {matchLabels: {app: web}}}]') +
      NP('b', 'prod', 'podSelector: {matchLabels: {app: db}}\ningress:\n- from: [{namespaceSelector: {matchLabels: {team: b}}}]\n  ports: [{port: 22}]'),
    flows: [
      ['prod/web', 'prod/db', 5432, 'allow'],
      ['dev/db', 'prod/db', 22, 'allow'],
      ['dev/db', 'prod/db', 5432, 'deny'],
    ],
  },
  {
    name: 'a policy naming another namespace\'s label in its podSelector selects nothing there (no reach across namespaces)',
    policies: NP('escape', 'dev', 'podSelector: {matchLabels: {io.kubernetes.pod.namespace: prod}}\npolicyTypes: [Ingress, Egress]'),
    flows: [
      ['prod/web', 'prod/db', 5432, 'allow'],
      ['dev/web', 'prod/db', 5432, 'allow'],
      ['prod/web', 'dev/db', 5432, 'allow'],
    ],
  },
  {
    name: 'a podSelector peer naming another namespace\'s label selects nothing there',
    policies: NP('peer', 'dev', 'podSelector: {matchLabels: {app: db}}\ningress:\n- from: [{podSelector: {matchLabels: {io.kubernetes.pod.namespace: prod, app: web}}}]'),
    flows: [
      ['prod/web', 'dev/db', 5432, 'deny'],
      ['dev/web', 'dev/db', 5432, 'deny'],
    ],
  },
  {
    name: 'a policy in another namespace does not select these pods',
    policies: NP('deny', 'dev', 'podSelector: {}\npolicyTypes: [Ingress, Egress]'),
    flows: [
      ['prod/web', 'prod/db', 5432, 'allow'],
      ['prod/web', 'dev/db', 5432, 'deny'],
      ['dev/web', 'prod/db', 5432, 'deny'],
    ],
  },
];

function parseFlowPort(p: Flow[2]): { port: number; proto: number } {
  if (typeof p === 'number') return { port: p, proto: Proto.TCP };
  return { port: Number(p.split('/')[0]), proto: Proto.UDP };
}

describe('Kubernetes NetworkPolicy semantics', () => {
  for (const c of cases) {
    test(c.name, () => {
      const { w, peers } = cluster();
      if (c.policies !== '') w.import(c.policies);
      const resolve = (name: string): Peer => (name.startsWith('ip:') ? w.external(name.slice(3)) : peers[name]!);
      for (const [src, dst, p, want] of c.flows) {
        const { port, proto } = parseFlowPort(p);
        const what = `${src} → ${dst}:${p}`;
        assert.equal(w.mapVerdict(resolve(src), resolve(dst), port, proto), want, `map state: ${what}`);
        assert.equal(w.traceVerdict(resolve(src), resolve(dst), port, proto), want, `trace: ${what}`);
      }
    });
  }
});
