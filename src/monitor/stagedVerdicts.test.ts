// The verdicts of staged policies and audit mode as the monitor resolves
// and prints them: a staged default deny is named by the staged view's
// enforcing rules, a staged rule by its cookie, an audited refusal by the
// rule (or default deny) that refused it.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { EventType, PolicyVerdict, ReservedCookie, TrafficDirection } from '../datapath/bpf/constants.js';
import type { DatapathEvent } from '../datapath/bpf/layout.js';
import { ruleCookie } from '../datapath/bpf/ruleCookie.js';
import { parseIp } from '../netip/index.js';
import { parsePolicyText, type RuleOrigin } from '../policy/index.js';
import { agentMonitorContext, formatEventLine, resolveEvent } from './index.js';

const POLICIES = parsePolicyText(`
apiVersion: tendril.io/v1
kind: TendrilNetworkPolicy
metadata: { name: db-80, namespace: shop, annotations: { tendril.io/staged: "true" } }
spec:
  endpointSelector: { matchLabels: { app: db } }
  ingress:
    - fromEndpoints: [ { matchLabels: { app: web } } ]
      toPorts: [ { ports: [ { port: "80", protocol: TCP } ] } ]
`);
const STAGED_BY: RuleOrigin[] = [{ policy: 'TendrilNetworkPolicy/shop/db-80', rule: 0, path: 'ingress' }];
const ENFORCED_BY: RuleOrigin[] = [{ policy: 'NetworkPolicy/shop/other', rule: 0, path: 'ingress' }];

const ctx = agentMonitorContext({
  identityLabels: () => undefined,
  policies: () => POLICIES,
  policyRevision: () => 1,
  enforcedBy: (endpoint, _direction, staged) => (endpoint !== 13 ? undefined : staged === true ? STAGED_BY : ENFORCED_BY),
});

function verdict(subtype: number, cookie: number = ReservedCookie.NONE): DatapathEvent {
  return {
    type: EventType.POLICY_VERDICT,
    subtype,
    direction: TrafficDirection.INGRESS,
    proto: 6,
    tcpFlags: 0x02,
    service: 0,
    ifindex: 0,
    srcIdentity: 30012,
    dstIdentity: 30013,
    srcEndpoint: 12,
    dstEndpoint: 13,
    cookie,
    origLen: 74,
    sport: 40312,
    dport: 8080,
    saddr: parseIp('10.200.0.12'),
    daddr: parseIp('10.200.0.13'),
    tsNs: process.hrtime.bigint(),
  };
}

describe('staged and audit verdicts', () => {
  test('would-drop by the staged view\'s default deny names the staged policy that sets it', () => {
    const e = resolveEvent(verdict(PolicyVerdict.WOULD_DROP), ctx)!;
    assert.equal(e.verdict, 'would-drop');
    assert.deepEqual(e.rule, { cookie: 0, text: 'no rule allows (default deny set by TendrilNetworkPolicy/shop/db-80 ingress)', origins: STAGED_BY });
    assert.match(formatEventLine(e), /^\S+ POLICY-VERDICT WOULD-DROP \(staged policy; passed\) ingress .*rule: no rule allows \(default deny set by TendrilNetworkPolicy\/shop\/db-80 ingress\)$/);
  });

  test('would-allow names the staged rule by its cookie', () => {
    const cookie = ruleCookie({ policy: 'TendrilNetworkPolicy/shop/db-80', rule: 0, path: 'spec.ingress[0]' });
    const e = resolveEvent(verdict(PolicyVerdict.WOULD_ALLOW, cookie), ctx)!;
    assert.equal(e.verdict, 'would-allow');
    assert.equal(e.rule?.text, 'TendrilNetworkPolicy/shop/db-80 spec.ingress[0]');
    assert.match(formatEventLine(e), /POLICY-VERDICT WOULD-ALLOW \(staged policy; dropped\)/);
  });

  test('audit names the enforced default deny (or the deny rule by its cookie)', () => {
    const e = resolveEvent(verdict(PolicyVerdict.AUDIT), ctx)!;
    assert.equal(e.verdict, 'audit');
    assert.deepEqual(e.rule?.origins, ENFORCED_BY);
    assert.match(formatEventLine(e), /POLICY-VERDICT AUDIT \(audit mode; passed\)/);
  });
});
