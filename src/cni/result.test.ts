import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { CniError } from './errors.js';
import { convertResult, decodeResult, parseResult, resultFamily, toCurrent } from './result.js';
import type { AnyResult, Result020, Result040, Result100 } from './types.js';
import { SPEC_VERSIONS } from './version.js';

function cniError(fn: () => unknown): CniError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof CniError, `expected a CniError, got ${String(err)}`);
    return err;
  }
  assert.fail('expected a CniError to be thrown');
}

const clone = <T>(v: T): T => structuredClone(v);
const FAMILY = { '0.1.0': '020', '0.2.0': '020', '0.3.0': '040', '0.3.1': '040', '0.4.0': '040', '1.0.0': '100', '1.1.0': '100' } as const;
type V = keyof typeof FAMILY;

// ---- fixtures -----------------------------------------------------------------

const DNS = {
  nameservers: ['10.96.0.10', 'fd00::a'],
  domain: 'cluster.local',
  search: ['default.svc.cluster.local', 'svc.cluster.local'],
  options: ['ndots:5'],
};

/** A 1.1.0 result using every field, two addresses per family, v6 listed first. */
const FULL_110: Omit<Result100, 'cniVersion'> = {
  interfaces: [
    { name: 'cni0', mac: '0a:58:0a:00:00:01' },
    {
      name: 'eth0',
      mac: '0a:58:0a:00:00:05',
      mtu: 1450,
      sandbox: '/var/run/netns/cni-1',
      socketPath: '/run/vhost/eth0.sock',
      pciID: '0000:00:1f.6',
    },
  ],
  ips: [
    { interface: 1, address: 'fd00::5/64', gateway: 'fd00::1' },
    { interface: 1, address: '10.0.0.5/24', gateway: '10.0.0.1' },
    { interface: 1, address: '10.0.1.5/24', gateway: '10.0.1.1' },
    { address: 'fd00:1::5/64' },
  ],
  routes: [
    { dst: '0.0.0.0/0', gw: '10.0.0.1', mtu: 1400, advmss: 1360, priority: 10, table: 100, scope: 0 },
    { dst: '::/0', gw: 'fd00::1', priority: 5 },
    { dst: '192.168.0.0/16' },
    { dst: 'fd10::/48', table: 7 },
  ],
  dns: DNS,
};

/** FULL_110 in the 0.3.x/0.4.0 shape: families tagged, 1.1.0-only fields gone. */
const FULL_040: Omit<Result040, 'cniVersion'> = {
  interfaces: [
    { name: 'cni0', mac: '0a:58:0a:00:00:01' },
    { name: 'eth0', mac: '0a:58:0a:00:00:05', sandbox: '/var/run/netns/cni-1' },
  ],
  ips: [
    { version: '6', interface: 1, address: 'fd00::5/64', gateway: 'fd00::1' },
    { version: '4', interface: 1, address: '10.0.0.5/24', gateway: '10.0.0.1' },
    { version: '4', interface: 1, address: '10.0.1.5/24', gateway: '10.0.1.1' },
    { version: '6', address: 'fd00:1::5/64' },
  ],
  routes: [{ dst: '0.0.0.0/0', gw: '10.0.0.1' }, { dst: '::/0', gw: 'fd00::1' }, { dst: '192.168.0.0/16' }, { dst: 'fd10::/48' }],
  dns: DNS,
};

/** FULL_040 back in the 1.x shape: what survives a trip through 0.4.0. */
const FULL_100_FROM_040: Omit<Result100, 'cniVersion'> = {
  interfaces: [
    { name: 'cni0', mac: '0a:58:0a:00:00:01' },
    { name: 'eth0', mac: '0a:58:0a:00:00:05', sandbox: '/var/run/netns/cni-1' },
  ],
  ips: [
    { interface: 1, address: 'fd00::5/64', gateway: 'fd00::1' },
    { interface: 1, address: '10.0.0.5/24', gateway: '10.0.0.1' },
    { interface: 1, address: '10.0.1.5/24', gateway: '10.0.1.1' },
    { address: 'fd00:1::5/64' },
  ],
  routes: [{ dst: '0.0.0.0/0', gw: '10.0.0.1' }, { dst: '::/0', gw: 'fd00::1' }, { dst: '192.168.0.0/16' }, { dst: 'fd10::/48' }],
  dns: DNS,
};

/** FULL_040 in the 0.1.0/0.2.0 shape: first address of each family, routes split by family. */
const FULL_020: Omit<Result020, 'cniVersion'> = {
  ip4: { ip: '10.0.0.5/24', gateway: '10.0.0.1', routes: [{ dst: '0.0.0.0/0', gw: '10.0.0.1' }, { dst: '192.168.0.0/16' }] },
  ip6: { ip: 'fd00::5/64', gateway: 'fd00::1', routes: [{ dst: '::/0', gw: 'fd00::1' }, { dst: 'fd10::/48' }] },
  dns: DNS,
};

/** FULL_020 converted up: v4 before v6, v4 routes before v6 routes, no interfaces. */
const FROM_020_AS_040: Omit<Result040, 'cniVersion'> = {
  ips: [
    { version: '4', address: '10.0.0.5/24', gateway: '10.0.0.1' },
    { version: '6', address: 'fd00::5/64', gateway: 'fd00::1' },
  ],
  routes: [{ dst: '0.0.0.0/0', gw: '10.0.0.1' }, { dst: '192.168.0.0/16' }, { dst: '::/0', gw: 'fd00::1' }, { dst: 'fd10::/48' }],
  dns: DNS,
};
const FROM_020_AS_100: Omit<Result100, 'cniVersion'> = {
  ips: [
    { address: '10.0.0.5/24', gateway: '10.0.0.1' },
    { address: 'fd00::5/64', gateway: 'fd00::1' },
  ],
  routes: FROM_020_AS_040.routes!,
  dns: DNS,
};

const SOURCE: Record<'020' | '040' | '100', object> = { '020': FULL_020, '040': FULL_040, '100': FULL_110 };
const EXPECTED: Record<'020' | '040' | '100', Record<'020' | '040' | '100', object>> = {
  '100': { '100': FULL_110, '040': FULL_040, '020': FULL_020 },
  '040': { '100': FULL_100_FROM_040, '040': FULL_040, '020': FULL_020 },
  '020': { '100': FROM_020_AS_100, '040': FROM_020_AS_040, '020': FULL_020 },
};

// ---- tests ------------------------------------------------------------------

describe('resultFamily', () => {
  test('maps every spec version to its result shape', () => {
    for (const v of SPEC_VERSIONS) assert.equal(resultFamily(v), FAMILY[v]);
  });
  for (const v of ['', '0.5.0', '1.2.0', '2.0.0', '1.0', '1']) {
    test(`unsupported version ${JSON.stringify(v)} -> code 1`, () => {
      const err = cniError(() => resultFamily(v));
      assert.equal(err.code, 1);
      assert.equal(err.msg, `unsupported CNI result version "${v}"`);
    });
  }
});

describe('convertResult: every version to every version (fixtures)', () => {
  for (const from of SPEC_VERSIONS) {
    for (const to of SPEC_VERSIONS) {
      test(`${from} -> ${to}`, () => {
        const input = { ...clone(SOURCE[FAMILY[from]]), cniVersion: from } as AnyResult;
        const before = clone(input);
        const out = convertResult(input, to);
        assert.deepEqual(out, { ...EXPECTED[FAMILY[from]][FAMILY[to]], cniVersion: to });
        assert.deepEqual(input, before, 'input must not be mutated');
        // the output is a valid result of the target version
        assert.deepEqual(parseResult(to, JSON.parse(JSON.stringify(out))), out);
      });
    }
  }

  test('up the chain 0.2.0 -> 0.4.0 -> 1.0.0 -> 1.1.0 equals the direct conversion', () => {
    let r: AnyResult = { ...clone(FULL_020), cniVersion: '0.2.0' };
    for (const v of ['0.4.0', '1.0.0', '1.1.0']) r = convertResult(r, v);
    assert.deepEqual(r, convertResult({ ...clone(FULL_020), cniVersion: '0.2.0' }, '1.1.0'));
    assert.deepEqual(r, { ...FROM_020_AS_100, cniVersion: '1.1.0' });
  });

  test('down the chain 1.1.0 -> 1.0.0 -> 0.4.0 -> 0.3.1 -> 0.3.0 -> 0.2.0 -> 0.1.0', () => {
    let r: AnyResult = { ...clone(FULL_110), cniVersion: '1.1.0' };
    for (const v of ['1.0.0', '0.4.0', '0.3.1', '0.3.0', '0.2.0', '0.1.0']) r = convertResult(r, v);
    assert.deepEqual(r, { ...FULL_020, cniVersion: '0.1.0' });
  });

  test('toCurrent converts to 1.1.0', () => {
    assert.deepEqual(toCurrent({ ...clone(FULL_040), cniVersion: '0.3.1' }), { ...FULL_100_FROM_040, cniVersion: '1.1.0' });
    assert.deepEqual(toCurrent({ ...clone(FULL_020), cniVersion: '0.1.0' }), { ...FROM_020_AS_100, cniVersion: '1.1.0' });
    assert.deepEqual(toCurrent({ ...clone(FULL_110), cniVersion: '1.0.0' }), { ...FULL_110, cniVersion: '1.1.0' });
  });
});

describe('convertResult: down to 0.2.0', () => {
  test('the first address of each family wins', () => {
    const r: Result100 = {
      cniVersion: '1.1.0',
      ips: [
        { address: '2001:db8::1/64', gateway: '2001:db8::ff' },
        { address: '192.0.2.10/24' },
        { address: '2001:db8:1::1/64' },
        { address: '198.51.100.7/24', gateway: '198.51.100.1' },
      ],
    };
    const out = convertResult(r, '0.2.0') as Result020;
    assert.deepEqual(out.ip4, { ip: '192.0.2.10/24' });
    assert.deepEqual(out.ip6, { ip: '2001:db8::1/64', gateway: '2001:db8::ff' });
  });

  test('from 0.4.0 the family comes from the version tag', () => {
    const r: Result040 = {
      cniVersion: '0.4.0',
      ips: [
        { version: '4', address: '192.0.2.10/24' },
        { version: '4', address: '192.0.2.11/24' },
      ],
    };
    assert.deepEqual(convertResult(r, '0.2.0'), { cniVersion: '0.2.0', ip4: { ip: '192.0.2.10/24' } });
  });

  test('routes are split by the family of their destination; routes of a missing family are dropped', () => {
    const r: Result100 = {
      cniVersion: '1.0.0',
      ips: [{ address: '192.0.2.10/24' }],
      routes: [
        { dst: '0.0.0.0/0', gw: '192.0.2.1' },
        { dst: '::/0', gw: 'fe80::1' },
        { dst: '10.0.0.0/8' },
      ],
    };
    assert.deepEqual(convertResult(r, '0.2.0'), {
      cniVersion: '0.2.0',
      ip4: { ip: '192.0.2.10/24', routes: [{ dst: '0.0.0.0/0', gw: '192.0.2.1' }, { dst: '10.0.0.0/8' }] },
    });
  });

  test('route attributes (mtu, table, …) are dropped', () => {
    const r: Result100 = {
      cniVersion: '1.1.0',
      ips: [{ address: '2001:db8::1/64' }],
      routes: [{ dst: '::/0', gw: '2001:db8::ff', mtu: 1280, advmss: 1220, priority: 1, table: 2, scope: 253 }],
    };
    assert.deepEqual(convertResult(r, '0.1.0'), {
      cniVersion: '0.1.0',
      ip6: { ip: '2001:db8::1/64', routes: [{ dst: '::/0', gw: '2001:db8::ff' }] },
    });
  });

  const addressLess: Array<[string, AnyResult]> = [
    ['1.1.0 without ips', { cniVersion: '1.1.0', interfaces: [{ name: 'eth0' }], routes: [{ dst: '0.0.0.0/0' }], dns: DNS }],
    ['1.0.0 with ips: []', { cniVersion: '1.0.0', ips: [] }],
    ['0.4.0 with ips: []', { cniVersion: '0.4.0', ips: [], routes: [] }],
    ['0.3.0 without anything', { cniVersion: '0.3.0' }],
  ];
  for (const [name, r] of addressLess) {
    for (const to of ['0.2.0', '0.1.0']) {
      test(`${name} -> ${to} fails with code 1 "no valid IP addresses"`, () => {
        const err = cniError(() => convertResult(r, to));
        assert.equal(err.code, 1);
        assert.match(err.msg, /no valid IP addresses/);
      });
    }
  }
});

describe('convertResult: between 1.x and 0.3.x/0.4.0', () => {
  test('1.1.0-only fields are dropped going down to 0.4.0, 0.3.1 and 0.3.0', () => {
    for (const to of ['0.4.0', '0.3.1', '0.3.0']) {
      const out = convertResult({ ...clone(FULL_110), cniVersion: '1.1.0' }, to) as Result040;
      for (const i of out.interfaces!) {
        for (const k of ['mtu', 'socketPath', 'pciID']) assert.ok(!(k in i), `${to}: interface keeps ${k}`);
      }
      for (const r of out.routes!) {
        for (const k of ['mtu', 'advmss', 'priority', 'table', 'scope']) assert.ok(!(k in r), `${to}: route keeps ${k}`);
      }
    }
  });

  test('1.1.0 -> 1.0.0 only relabels (libcni: "the types did not change between v1.0 and v1.1")', () => {
    const out = convertResult({ ...clone(FULL_110), cniVersion: '1.1.0' }, '1.0.0');
    assert.deepEqual(out, { ...FULL_110, cniVersion: '1.0.0' });
    assert.deepEqual(convertResult(out, '1.1.0'), { ...FULL_110, cniVersion: '1.1.0' });
  });

  const families: Array<[string, '4' | '6']> = [
    ['10.1.2.3/8', '4'],
    ['0.0.0.0/0', '4'],
    ['255.255.255.255/32', '4'],
    ['2001:db8::1/64', '6'],
    ['::/0', '6'],
    ['::1/128', '6'],
    ['fe80::1/64', '6'],
    ['64:ff9b::10.0.0.1/96', '6'],
  ];
  for (const [address, version] of families) {
    for (const from of ['1.0.0', '1.1.0']) {
      test(`${from} -> 0.4.0 tags ${address} as version ${version}`, () => {
        const out = convertResult({ cniVersion: from, ips: [{ address, interface: 0 }] }, '0.4.0') as Result040;
        assert.deepEqual(out.ips, [{ version, address, interface: 0 }]);
      });
    }
  }

  test('0.4.0 -> 1.0.0 removes the version tag and keeps the interface index', () => {
    const out = convertResult(
      {
        cniVersion: '0.4.0',
        ips: [
          { version: '4', interface: 2, address: '10.0.0.2/24', gateway: '10.0.0.1' },
          { version: '6', address: 'fd00::2/64' },
        ],
      },
      '1.0.0',
    );
    assert.deepEqual(out, {
      cniVersion: '1.0.0',
      ips: [{ interface: 2, address: '10.0.0.2/24', gateway: '10.0.0.1' }, { address: 'fd00::2/64' }],
    });
  });

  test('conversions within a family only relabel', () => {
    const pairs: Array<[string, string, object]> = [
      ['0.1.0', '0.2.0', FULL_020],
      ['0.2.0', '0.1.0', FULL_020],
      ['0.3.0', '0.4.0', FULL_040],
      ['0.4.0', '0.3.1', FULL_040],
      ['0.3.1', '0.3.0', FULL_040],
      ['1.0.0', '1.1.0', FULL_110],
    ];
    for (const [from, to, body] of pairs) {
      assert.deepEqual(convertResult({ ...clone(body), cniVersion: from } as AnyResult, to), { ...body, cniVersion: to });
    }
  });
});

describe('convertResult: unsupported versions', () => {
  for (const to of ['0.5.0', '2.0.0', '', '1.0', 'latest']) {
    test(`to ${JSON.stringify(to)} -> code 1`, () => {
      const err = cniError(() => convertResult({ ...clone(FULL_110), cniVersion: '1.1.0' }, to));
      assert.equal(err.code, 1);
    });
  }
  test('from an unknown version -> code 1', () => {
    const err = cniError(() => convertResult({ cniVersion: '0.9.0' } as AnyResult, '1.0.0'));
    assert.equal(err.code, 1);
  });
});

describe('parseResult / decodeResult', () => {
  test('valid fixtures parse and take the given version', () => {
    for (const v of SPEC_VERSIONS) {
      const body = SOURCE[FAMILY[v]];
      assert.deepEqual(parseResult(v, { ...clone(body), cniVersion: 'ignored' }), { ...body, cniVersion: v });
    }
  });

  test('decodeResult trusts the cniVersion in the bytes; "" means the fallback', () => {
    assert.deepEqual(decodeResult(JSON.stringify({ ...FULL_040, cniVersion: '0.3.1' }), '1.1.0'), { ...FULL_040, cniVersion: '0.3.1' });
    assert.deepEqual(decodeResult(JSON.stringify({ ...FULL_110, cniVersion: '1.0.0' }), '0.2.0'), { ...FULL_110, cniVersion: '1.0.0' });
    assert.deepEqual(decodeResult(JSON.stringify({ ...FULL_020, cniVersion: '' }), '0.1.0'), { ...FULL_020, cniVersion: '0.1.0' });
  });

  test('decodeResult uses the fallback when cniVersion is absent', () => {
    assert.deepEqual(decodeResult(JSON.stringify(FULL_020), '0.2.0'), { ...FULL_020, cniVersion: '0.2.0' });
    assert.deepEqual(decodeResult(JSON.stringify(FULL_110), '1.1.0'), { ...FULL_110, cniVersion: '1.1.0' });
  });

  for (const bytes of ['', 'nope', '{', '[]', 'null', '3', '"x"']) {
    test(`decodeResult(${JSON.stringify(bytes)}) -> code 6`, () => {
      assert.equal(cniError(() => decodeResult(bytes, '1.1.0')).code, 6);
    });
  }

  test('an unsupported version is code 1, not 6', () => {
    assert.equal(cniError(() => parseResult('0.5.0', {})).code, 1);
    assert.equal(cniError(() => decodeResult('{"cniVersion":"3.0.0"}', '1.1.0')).code, 1);
  });

  const badCidrs = ['10.0.0.1', '10.0.0.1/33', '10.0.0.300/24', 'fd00::/129', 'fd00::1', 'foo/24', '10.0.0.1/', '/24', '10.0.0.1/-1', '10.0.0.1/2a', '', '10.0.0.1/24/1', ' 10.0.0.1/24'];
  const badIps = ['10.0.0.256', '10.0.0', 'fd00::1/64', '10.0.0.1/32', 'gateway', '', 'fd00:::1', ' 10.0.0.1'];

  type Maker = (x: string) => Record<string, unknown>;
  const cidrSites: Array<[string, Maker]> = [
    ['0.2.0 ip4.ip', (x) => ({ ip4: { ip: x } })],
    ['0.2.0 ip6.ip', (x) => ({ ip6: { ip: x } })],
    ['0.2.0 ip4.routes[].dst', (x) => ({ ip4: { ip: '10.0.0.2/24', routes: [{ dst: x }] } })],
    ['0.4.0 ips[].address', (x) => ({ ips: [{ version: '4', address: x }] })],
    ['0.4.0 routes[].dst', (x) => ({ routes: [{ dst: x }] })],
    ['1.1.0 ips[].address', (x) => ({ ips: [{ address: x }] })],
    ['1.1.0 routes[].dst', (x) => ({ routes: [{ dst: x }] })],
  ];
  const ipSites: Array<[string, Maker]> = [
    ['0.2.0 ip4.gateway', (x) => ({ ip4: { ip: '10.0.0.2/24', gateway: x } })],
    ['0.2.0 ip6.routes[].gw', (x) => ({ ip6: { ip: 'fd00::2/64', routes: [{ dst: '::/0', gw: x }] } })],
    ['0.4.0 ips[].gateway', (x) => ({ ips: [{ version: '4', address: '10.0.0.2/24', gateway: x }] })],
    ['0.4.0 routes[].gw', (x) => ({ routes: [{ dst: '0.0.0.0/0', gw: x }] })],
    ['1.1.0 ips[].gateway', (x) => ({ ips: [{ address: '10.0.0.2/24', gateway: x }] })],
    ['1.1.0 routes[].gw', (x) => ({ routes: [{ dst: '0.0.0.0/0', gw: x }] })],
  ];
  const versionOf = (site: string) => site.slice(0, 5);
  for (const sites of [cidrSites, ipSites]) {
    for (const entry of sites) {
      const inner = entry[1];
      entry[1] = (x) => ({ cniVersion: versionOf(entry[0]), ...inner(x) });
    }
  }

  for (const [site, make] of cidrSites) {
    test(`bad CIDR in ${site} -> code 6`, () => {
      // control: the same shape with a good value parses
      const good = site.includes('ip6') ? 'fd00::2/64' : '10.0.0.0/8';
      assert.doesNotThrow(() => parseResult(versionOf(site), make(good)));
      for (const bad of badCidrs) {
        const err = cniError(() => parseResult(versionOf(site), make(bad)));
        assert.equal(err.code, 6, `${site} = ${JSON.stringify(bad)}`);
        assert.equal(err.msg, `invalid ${versionOf(site)} result`);
        assert.ok(err.details.length > 0);
      }
    });
  }
  for (const [site, make] of ipSites) {
    test(`bad gateway in ${site} -> code 6`, () => {
      const good = site.includes('ip6') ? 'fd00::1' : '10.0.0.1';
      assert.doesNotThrow(() => parseResult(versionOf(site), make(good)));
      for (const bad of badIps) {
        const err = cniError(() => parseResult(versionOf(site), make(bad)));
        assert.equal(err.code, 6, `${site} = ${JSON.stringify(bad)}`);
      }
      // and via decodeResult
      const bytes = JSON.stringify(make('999.1.1.1'));
      assert.equal(cniError(() => decodeResult(bytes, '1.1.0')).code, 6);
    });
  }

  test('other malformed shapes -> code 6', () => {
    const cases: Array<[string, unknown]> = [
      ['0.4.0', { ips: [{ version: '5', address: '10.0.0.1/24' }] }],
      ['0.4.0', { ips: [{ address: '10.0.0.1/24' }] }],
      ['0.4.0', { ips: [{ version: '4', address: '10.0.0.1/24', interface: -1 }] }],
      ['1.1.0', { ips: [{ address: '10.0.0.1/24', interface: 1.5 }] }],
      ['1.1.0', { interfaces: [{ mac: 'aa' }] }],
      ['1.1.0', { interfaces: [{ name: 'eth0', mtu: -1 }] }],
      ['1.1.0', { routes: [{ dst: '0.0.0.0/0', table: 'main' }] }],
      ['1.1.0', { ips: {} }],
      ['0.2.0', { ip4: { gateway: '10.0.0.1' } }],
      ['1.0.0', { dns: { nameservers: '10.0.0.1' } }],
    ];
    for (const [v, body] of cases) {
      assert.equal(cniError(() => parseResult(v, { cniVersion: v, ...(body as object) })).code, 6, `${v} ${JSON.stringify(body)}`);
    }
  });

  test('IPv6 zone ids are not valid in gateways or CIDRs', () => {
    const ok = { cniVersion: '1.1.0', ips: [{ address: 'fe80::2/64', gateway: 'fe80::1' }] };
    assert.doesNotThrow(() => parseResult('1.1.0', ok));
    assert.equal(cniError(() => parseResult('1.1.0', { cniVersion: '1.1.0', ips: [{ address: 'fe80::2/64', gateway: 'fe80::1%eth0' }] })).code, 6);
    assert.equal(cniError(() => parseResult('1.1.0', { cniVersion: '1.1.0', ips: [{ address: 'fe80::2%eth0/64' }] })).code, 6);
  });
});

// ---- properties -------------------------------------------------------------

const cidr4 = fc.tuple(fc.ipV4(), fc.integer({ min: 0, max: 32 })).map(([a, l]) => `${a}/${l}`);
const cidr6 = fc.tuple(fc.ipV6(), fc.integer({ min: 0, max: 128 })).map(([a, l]) => `${a}/${l}`);
const family = fc.constantFrom<'4' | '6'>('4', '6');
const cidrOf = (f: '4' | '6') => (f === '4' ? cidr4 : cidr6);
const ipOf = (f: '4' | '6') => (f === '4' ? fc.ipV4() : fc.ipV6());
const word = fc.string({ minLength: 1, maxLength: 10 });
const small = fc.nat(65535);

const dnsArb = fc.record(
  {
    nameservers: fc.array(fc.oneof(fc.ipV4(), fc.ipV6()), { maxLength: 3 }),
    domain: word,
    search: fc.array(word, { maxLength: 3 }),
    options: fc.array(word, { maxLength: 3 }),
  },
  { requiredKeys: [], noNullPrototype: true },
);

const iface100 = fc.record(
  { name: word, mac: word, mtu: small, sandbox: word, socketPath: word, pciID: word },
  { requiredKeys: ['name'], noNullPrototype: true },
);
const ip100 = family.chain((f) =>
  fc.record({ interface: fc.nat(8), address: cidrOf(f), gateway: ipOf(f) }, { requiredKeys: ['address'], noNullPrototype: true }),
);
const route100 = family.chain((f) =>
  fc.record(
    { dst: cidrOf(f), gw: ipOf(f), mtu: small, advmss: small, priority: small, table: small, scope: fc.nat(255) },
    { requiredKeys: ['dst'], noNullPrototype: true },
  ),
);
const result110 = fc
  .record(
    {
      interfaces: fc.array(iface100, { maxLength: 3 }),
      ips: fc.array(ip100, { maxLength: 5 }),
      routes: fc.array(route100, { maxLength: 5 }),
      dns: dnsArb,
    },
    { requiredKeys: [], noNullPrototype: true },
  )
  .map((r) => ({ ...r, cniVersion: '1.1.0' }) as Result100);

const iface040 = fc.record({ name: word, mac: word, sandbox: word }, { requiredKeys: ['name'], noNullPrototype: true });
const ip040 = family.chain((f) =>
  fc
    .record({ interface: fc.nat(8), address: cidrOf(f), gateway: ipOf(f) }, { requiredKeys: ['address'], noNullPrototype: true })
    .map((ip) => ({ version: f, ...ip })),
);
const route040 = family.chain((f) => fc.record({ dst: cidrOf(f), gw: ipOf(f) }, { requiredKeys: ['dst'], noNullPrototype: true }));
const result040 = fc
  .record(
    {
      interfaces: fc.array(iface040, { maxLength: 3 }),
      ips: fc.array(ip040, { maxLength: 5 }),
      routes: fc.array(route040, { maxLength: 5 }),
      dns: dnsArb,
    },
    { requiredKeys: [], noNullPrototype: true },
  )
  .map((r) => ({ ...r, cniVersion: '0.4.0' }) as Result040);

const ipConfig020 = (f: '4' | '6') =>
  fc.record(
    {
      ip: cidrOf(f),
      gateway: ipOf(f),
      routes: fc.array(
        fc.record({ dst: cidrOf(f), gw: ipOf(f) }, { requiredKeys: ['dst'], noNullPrototype: true }),
        { minLength: 1, maxLength: 4 },
      ),
    },
    { requiredKeys: ['ip'], noNullPrototype: true },
  );
const result020 = fc
  .record({ ip4: ipConfig020('4'), ip6: ipConfig020('6'), dns: dnsArb }, { requiredKeys: [], noNullPrototype: true })
  .filter((r) => r.ip4 !== undefined || r.ip6 !== undefined)
  .map((r) => ({ ...r, cniVersion: '0.2.0' }) as Result020);

/** What of a 1.1.0 result the 0.4.0 shape can hold. */
function strip110(r: Result100): Result100 {
  const out: Result100 = { cniVersion: r.cniVersion };
  if (r.interfaces) {
    out.interfaces = r.interfaces.map(({ name, mac, sandbox }) => ({
      name,
      ...(mac !== undefined ? { mac } : {}),
      ...(sandbox !== undefined ? { sandbox } : {}),
    }));
  }
  if (r.ips) out.ips = r.ips;
  if (r.routes) out.routes = r.routes.map(({ dst, gw }) => ({ dst, ...(gw !== undefined ? { gw } : {}) }));
  if (r.dns) out.dns = r.dns;
  return out;
}

describe('properties', () => {
  test('generated results are valid (sanity)', () => {
    fc.assert(
      fc.property(result110, result040, result020, (a, b, c) => {
        assert.deepEqual(parseResult('1.1.0', clone(a)), a);
        assert.deepEqual(parseResult('0.4.0', clone(b)), b);
        assert.deepEqual(parseResult('0.2.0', clone(c)), c);
      }),
      { numRuns: 50 },
    );
  });

  test('1.1.0 -> 0.4.0 -> 1.1.0 preserves everything 0.4.0 can hold', () => {
    fc.assert(
      fc.property(result110, (r) => {
        const before = clone(r);
        const down = convertResult(r, '0.4.0');
        assert.deepEqual(parseResult('0.4.0', JSON.parse(JSON.stringify(down))), down);
        const back = convertResult(down, '1.1.0');
        assert.deepEqual(back, strip110(r));
        assert.deepEqual(r, before);
      }),
      { numRuns: 300 },
    );
  });

  test('0.4.0 -> 1.0.0 -> 0.4.0 is the identity', () => {
    fc.assert(
      fc.property(result040, (r) => {
        const up = convertResult(r, '1.0.0');
        assert.deepEqual(parseResult('1.0.0', JSON.parse(JSON.stringify(up))), up);
        assert.deepEqual(convertResult(up, '0.4.0'), r);
      }),
      { numRuns: 300 },
    );
  });

  test('0.2.0 -> 1.1.0 -> 0.2.0 is the identity', () => {
    fc.assert(
      fc.property(result020, (r) => {
        const up = convertResult(r, '1.1.0');
        assert.deepEqual(parseResult('1.1.0', JSON.parse(JSON.stringify(up))), up);
        assert.deepEqual(convertResult(up, '0.2.0'), r);
      }),
      { numRuns: 300 },
    );
  });

  test('any 1.1.0 result converts to every version, failing only to 0.x.0 without addresses', () => {
    fc.assert(
      fc.property(result110, fc.constantFrom(...SPEC_VERSIONS), (r, to) => {
        const hasIps = (r.ips ?? []).length > 0;
        if (FAMILY[to as V] === '020' && !hasIps) {
          assert.equal(cniError(() => convertResult(r, to)).code, 1);
          return;
        }
        const out = convertResult(r, to);
        assert.equal(out.cniVersion, to);
        assert.deepEqual(parseResult(to, JSON.parse(JSON.stringify(out))), out);
      }),
      { numRuns: 300 },
    );
  });
});
