import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isServiceError, ServiceErrorCode } from './errors.js';
import { validateServiceSpec } from './validate.js';

const base = () => ({
  'frontend-address': { ip: '10.96.0.10', port: 80, protocol: 'TCP' },
  'backend-addresses': [{ ip: '10.0.0.5', port: 8080 }],
  flags: { type: 'ClusterIP' },
});

// Bodies are edited freely here, wrong types included: that is what the table tests.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Body = Record<string, any>;
const edit = (f: (b: Body) => void): Body => {
  const b: Body = structuredClone(base());
  f(b);
  return b;
};

describe('validateServiceSpec', () => {
  it('fills in the defaults', () => {
    assert.deepEqual(validateServiceSpec(7, base()), {
      id: 7,
      frontend: { ip: '10.96.0.10', port: 80, protocol: 'TCP' },
      backends: [{ ip: '10.0.0.5', port: 8080, weight: 1, state: 'active' }],
      flags: { type: 'ClusterIP', trafficPolicy: 'Cluster', internalTrafficPolicy: 'Cluster', sessionAffinity: false, sessionAffinityTimeout: 10800, sourceRanges: [] },
    });
  });

  it('loadBalancerSourceRanges: a LoadBalancer\'s only, CIDRs of its family, host bits cleared, sorted without repeats', () => {
    const lb = (sourceRanges: unknown, ip = '198.51.100.10', type = 'LoadBalancer') =>
      validateServiceSpec(7, edit((b) => {
        b['frontend-address'].ip = ip;
        b.flags = { type, sourceRanges };
      }));
    assert.deepEqual(lb(['203.0.113.7/24', '192.0.2.0/25', '203.0.113.0/24']).flags.sourceRanges, ['192.0.2.0/25', '203.0.113.0/24']);
    assert.deepEqual(lb([]).flags.sourceRanges, []);
    const refused = (f: () => unknown, message: RegExp) => assert.throws(f, (e: unknown) => isServiceError(e, ServiceErrorCode.INVALID) && message.test(e.message));
    refused(() => lb(['203.0.113.0/24'], '10.96.0.10', 'ClusterIP'), /^flags\.sourceRanges: only a LoadBalancer frontend takes sourceRanges, this one is ClusterIP/);
    refused(() => lb(['2001:db8::/32']), /^flags\.sourceRanges: 2001:db8::\/32 is not IPv4 like the frontend 198\.51\.100\.10/);
    refused(() => lb(['203.0.113.0']), /^flags\.sourceRanges\[0\]: "203\.0\.113\.0" is not a CIDR/);
    refused(() => lb('203.0.113.0/24'), /^flags\.sourceRanges: must be a list of CIDRs/);
    refused(() => lb(Array.from({ length: 65 }, (_, i) => `10.${i}.0.0/16`)), /at most 64 ranges/);
  });

  it('takes an IPv6 ClusterIP with IPv6 backends, addresses in canonical form', () => {
    const body = edit((b) => {
      b['frontend-address'].ip = 'FD00:96:0::0a';
      b['backend-addresses'] = [{ ip: 'fd00:10:0:0::5', port: 8080 }, { ip: 'fd00:10::6', port: 8080 }];
    });
    const svc = validateServiceSpec(7, body, { podCidrs: ['fd00:10:0:1::/64'] });
    assert.equal(svc.frontend.ip, 'fd00:96::a');
    assert.deepEqual(svc.backends.map((b) => b.ip), ['fd00:10::5', 'fd00:10::6']);
    // From outside: IPv6 external and LoadBalancer IPs, and a NodePort on a named IPv6 node address or on every one (::).
    const v6Backends = [{ ip: 'fd00:10::5', port: 8080 }];
    for (const [type, ip] of [['ExternalIPs', '2001:db8::50'], ['LoadBalancer', '2001:db8::51'], ['NodePort', 'fd00:77::5'], ['NodePort', '::']] as const) {
      const s = validateServiceSpec(7, edit((b) => {
        b.flags = { type };
        b['frontend-address'].ip = ip;
        b['backend-addresses'] = v6Backends;
      }), { nodeAddresses: new Set(['192.0.2.10', 'fd00:77::5']) });
      assert.equal(s.frontend.ip, ip);
    }
    // The node's pod CIDR in IPv6 is as taken as in IPv4.
    assert.throws(() => validateServiceSpec(7, edit((b) => {
      b['frontend-address'].ip = 'fd00:10:0:1::9';
      b['backend-addresses'] = [{ ip: 'fd00:10::5', port: 8080 }];
    }), { podCidrs: ['fd00:10:0:1::/64'] }), /in this node's pod CIDR fd00:10:0:1::\/64/);
  });

  it('accepts every type, state and protocol it serves', () => {
    const nodeAddresses = new Set(['192.0.2.10']);
    const ok: Body[] = [
      edit((b) => (b.flags = { type: 'NodePort', trafficPolicy: 'Local' })).valueOf(),
      edit((b) => {
        b.flags = { type: 'NodePort' };
        b['frontend-address'] = { ip: '0.0.0.0', port: 30080, protocol: 'UDP' };
      }),
      edit((b) => {
        b.flags = { type: 'NodePort' };
        b['frontend-address'].ip = '192.0.2.10';
      }),
      edit((b) => (b.flags = { type: 'ExternalIPs', trafficPolicy: 'Local', sessionAffinity: true, sessionAffinityTimeout: 1 })),
      edit((b) => (b.flags = { type: 'LoadBalancer', sessionAffinityTimeout: 86400 })),
      // internalTrafficPolicy concerns the node's own traffic, which a ClusterIP has.
      edit((b) => (b.flags = { type: 'ClusterIP', internalTrafficPolicy: 'Local' })),
      edit((b) => (b.flags = { type: 'LoadBalancer', trafficPolicy: 'Local', internalTrafficPolicy: 'Local' })),
      edit((b) => (b['backend-addresses'] = ['active', 'terminating', 'quarantined', 'maintenance'].map((state, i) => ({ ip: `10.0.0.${i + 1}`, port: 1, state, weight: i === 0 ? 0 : 65535 })))),
      edit((b) => (b['backend-addresses'] = [])),
      edit((b) => (b.id = 7)),
      // What GET returns may be PUT back: status-only fields are ignored.
      edit((b) => {
        b.realized = true;
        b['backend-addresses'][0].id = 3;
        b['backend-addresses'][0].local = false;
      }),
    ];
    for (const b of ok.slice(0, 1)) b['frontend-address'].ip = '0.0.0.0';
    for (const b of ok) assert.doesNotThrow(() => validateServiceSpec(7, b, { nodeAddresses }), JSON.stringify(b));
  });

  const bad: Array<[string, unknown, RegExp, number?]> = [
    ['not an object', 'x', /^body:/],
    ['path id 0', base(), /^id: must be a whole number 1\.\.65535/, 0],
    ['path id too big', base(), /^id:/, 65536],
    ['body id differs', edit((b) => (b.id = 8)), /^id: the body's ID 8 is not the path's 7/],
    ['unknown top field', edit((b) => (b.frontend = {})), /^frontend: unknown field/],
    ['no frontend', edit((b) => delete b['frontend-address']), /^frontend-address:/],
    ['an IPv6 frontend with IPv4 backends', edit((b) => (b['frontend-address'].ip = 'fd00::10')), /^backend-addresses\[0\]\.ip: 10\.0\.0\.5 is not IPv6 like the frontend fd00::10 \(a service is one family\)/],
    ['an IPv6 ClusterIP on ::', edit((b) => {
      b['frontend-address'].ip = '::';
      b['backend-addresses'] = [{ ip: 'fd00:10::5', port: 8080 }];
    }), /^frontend-address\.ip: :: is the unspecified address/],
    ['an IPv6 NodePort on an address not the node\'s', edit((b) => {
      b.flags = { type: 'NodePort' };
      b['frontend-address'].ip = 'fd00::99';
      b['backend-addresses'] = [{ ip: 'fd00:10::5', port: 8080 }];
    }), /^frontend-address\.ip: a NodePort frontend is 0\.0\.0\.0 or :: \(every node address of the family\) or one of this node's addresses/],
    ['an IPv6 multicast frontend', edit((b) => (b['frontend-address'].ip = 'ff02::1')), /^frontend-address\.ip: ff02::1 is a multicast address/],
    // The IPv6 hairpin source (LB_HAIRPIN_IP6) lives there: no service may take it.
    ['a frontend in the discard-only prefix', edit((b) => (b['frontend-address'].ip = '100::a9fe:2a01')), /^frontend-address\.ip: 100::a9fe:2a01 is a discard-only address \(100::\/64\)/],
    ['an IPv6 link-local frontend', edit((b) => (b['frontend-address'].ip = 'fe80::1')), /^frontend-address\.ip: fe80::1 is a link-local address/],
    ['the IPv6 loopback as backend', edit((b) => {
      b['frontend-address'].ip = 'fd00::10';
      b['backend-addresses'][0].ip = '::1';
    }), /^backend-addresses\[0\]\.ip: ::1 is a loopback address/],
    ['an IPv4-mapped frontend', edit((b) => (b['frontend-address'].ip = '::ffff:10.96.0.10')), /^frontend-address\.ip: ::ffff:a60:a is an IPv4-mapped address/],
    ['not an address', edit((b) => (b['frontend-address'].ip = '10.96.0')), /^frontend-address\.ip: "10\.96\.0" is not an IP address/],
    ['ClusterIP 0.0.0.0', edit((b) => (b['frontend-address'].ip = '0.0.0.0')), /^frontend-address\.ip: 0\.0\.0\.0 is not a unicast/],
    ['multicast', edit((b) => (b['frontend-address'].ip = '224.0.0.1')), /^frontend-address\.ip: .*multicast/],
    ['broadcast', edit((b) => (b['frontend-address'].ip = '255.255.255.255')), /^frontend-address\.ip: .*broadcast/],
    ['loopback', edit((b) => (b['frontend-address'].ip = '127.0.0.1')), /^frontend-address\.ip: .*loopback/],
    ['hairpin address', edit((b) => (b['frontend-address'].ip = '169.254.42.1')), /^frontend-address\.ip: .*link-local/],
    ['port 0', edit((b) => (b['frontend-address'].port = 0)), /^frontend-address\.port: must be a whole number 1\.\.65535/],
    ['port 65536', edit((b) => (b['frontend-address'].port = 65536)), /^frontend-address\.port:/],
    ['port string', edit((b) => (b['frontend-address'].port = '80')), /^frontend-address\.port:/],
    ['SCTP', edit((b) => (b['frontend-address'].protocol = 'SCTP')), /^frontend-address\.protocol: SCTP services are not supported yet/],
    ['lowercase tcp', edit((b) => (b['frontend-address'].protocol = 'tcp')), /^frontend-address\.protocol: must be TCP or UDP/],
    ['NodePort on a foreign address', edit((b) => (b.flags.type = 'NodePort')), /^frontend-address\.ip: a NodePort frontend is 0\.0\.0\.0 .* got 10\.96\.0\.10/],
    ['ExternalIPs 0.0.0.0', edit((b) => {
      b.flags.type = 'ExternalIPs';
      b['frontend-address'].ip = '0.0.0.0';
    }), /^frontend-address\.ip:/],
    ['type', edit((b) => (b.flags.type = 'ExternalName')), /^flags\.type: must be one of ClusterIP, NodePort, ExternalIPs, LoadBalancer/],
    ['no flags', edit((b) => delete b.flags), /^flags:/],
    ['traffic policy', edit((b) => (b.flags.trafficPolicy = 'local')), /^flags\.trafficPolicy: must be one of Cluster, Local/],
    ['internal traffic policy', edit((b) => (b.flags.internalTrafficPolicy = 'Node')), /^flags\.internalTrafficPolicy: must be one of Cluster, Local/],
    ['Local on ClusterIP', edit((b) => (b.flags.trafficPolicy = 'Local')), /^flags\.trafficPolicy: Local applies to NodePort/],
    ['affinity not boolean', edit((b) => (b.flags.sessionAffinity = 'yes')), /^flags\.sessionAffinity:/],
    ['affinity timeout 0', edit((b) => (b.flags.sessionAffinityTimeout = 0)), /^flags\.sessionAffinityTimeout: must be a whole number 1\.\.86400/],
    ['affinity timeout too long', edit((b) => (b.flags.sessionAffinityTimeout = 86401)), /^flags\.sessionAffinityTimeout:/],
    ['unknown flag', edit((b) => (b.flags.hairpin = true)), /^flags\.hairpin: unknown field/],
    ['backends not a list', edit((b) => (b['backend-addresses'] = {})), /^backend-addresses: must be a list/],
    ['an IPv6 backend of an IPv4 service', edit((b) => (b['backend-addresses'][0].ip = 'fd00::5')), /^backend-addresses\[0\]\.ip: fd00::5 is not IPv4 like the frontend 10\.96\.0\.10/],
    ['backend port', edit((b) => (b['backend-addresses'][0].port = 0)), /^backend-addresses\[0\]\.port:/],
    ['backend weight', edit((b) => (b['backend-addresses'][0].weight = 65536)), /^backend-addresses\[0\]\.weight: must be a whole number 0\.\.65535/],
    ['backend negative weight', edit((b) => (b['backend-addresses'][0].weight = -1)), /^backend-addresses\[0\]\.weight:/],
    ['backend state', edit((b) => (b['backend-addresses'][0].state = 'draining')), /^backend-addresses\[0\]\.state: must be one of active, terminating, quarantined, maintenance/],
    ['backend unknown field', edit((b) => (b['backend-addresses'][0].protocol = 'TCP')), /^backend-addresses\[0\]\.protocol: unknown field/],
    ['duplicate backend', edit((b) => b['backend-addresses'].push({ ip: '10.0.0.6', port: 1 }, { ip: '10.0.0.5', port: 8080, weight: 3 })), /^backend-addresses\[2\]: duplicate of backend-addresses\[0\] \(10\.0\.0\.5:8080\)/],
  ];
  for (const [name, body, message, id] of bad) {
    it(`refuses ${name}`, () => {
      assert.throws(
        () => validateServiceSpec(id ?? 7, body, { nodeAddresses: new Set(['192.0.2.10']) }),
        (err: unknown) => isServiceError(err, ServiceErrorCode.INVALID) && message.test(err.message) || assert.fail(`${name}: ${(err as Error).message}`),
      );
    });
  }
});
