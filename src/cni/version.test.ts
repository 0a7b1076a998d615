import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { CniError } from './errors.js';
import {
  compareVersions,
  CURRENT_VERSION,
  decodeVersion,
  highestSupported,
  IMPLICIT_VERSION,
  isSpecVersion,
  parseVersion,
  pluginVersionInfo,
  reconcileVersion,
  SPEC_VERSIONS,
  versionAtLeast,
} from './version.js';

function assertCniError(fn: () => unknown, code: number, msg?: string | RegExp): CniError {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  assert.ok(caught instanceof CniError, `expected a CniError, got ${String(caught)}`);
  assert.equal(caught.code, code);
  if (typeof msg === 'string') assert.equal(caught.msg, msg);
  else if (msg) assert.match(caught.msg, msg);
  return caught;
}

describe('SPEC_VERSIONS', () => {
  test('lists the seven spec versions, oldest first, current last', () => {
    assert.deepEqual([...SPEC_VERSIONS], ['0.1.0', '0.2.0', '0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0']);
    assert.equal(CURRENT_VERSION, '1.1.0');
    assert.equal(IMPLICIT_VERSION, '0.1.0');
    for (let i = 1; i < SPEC_VERSIONS.length; i++) {
      assert.ok(compareVersions(SPEC_VERSIONS[i - 1]!, SPEC_VERSIONS[i]!) < 0);
    }
  });

  test('isSpecVersion', () => {
    for (const v of SPEC_VERSIONS) assert.equal(isSpecVersion(v), true);
    for (const v of ['', '1.0', '1', '0.5.0', '2.0.0', ' 1.0.0', '1.0.0 ', 1, null, undefined, {}]) {
      assert.equal(isSpecVersion(v), false, String(v));
    }
  });
});

describe('parseVersion', () => {
  const ok: Array<[string, [number, number, number]]> = [
    ['1', [1, 0, 0]],
    ['1.1', [1, 1, 0]],
    ['0.3.1', [0, 3, 1]],
    ['10.20.30', [10, 20, 30]],
    ['01.002.0003', [1, 2, 3]],
  ];
  for (const [input, [major, minor, micro]] of ok) {
    test(`parses "${input}"`, () => {
      assert.deepEqual(parseVersion(input), { major, minor, micro });
    });
  }

  const bad = ['', '.', '1.', '.1', '1..2', '1.2.3.4', 'a.b.c', 'v1.0.0', '1.0.0-rc1', '-1.0.0', ' 1.0.0', '1.0.0\n', '1.x'];
  for (const input of bad) {
    test(`rejects ${JSON.stringify(input)} with code 6`, () => {
      assertCniError(() => parseVersion(input), 6, /invalid version/);
    });
  }
});

describe('compareVersions / versionAtLeast', () => {
  const table: Array<[string, string, -1 | 0 | 1]> = [
    ['0.1.0', '0.2.0', -1],
    ['0.3.0', '0.3.1', -1],
    ['0.3.1', '0.4.0', -1],
    ['0.4.0', '1.0.0', -1],
    ['1.0.0', '1.1.0', -1],
    ['1.1.0', '1.1.0', 0],
    ['1', '1.0.0', 0],
    ['1.1', '1.1.0', 0],
    ['0.10.0', '0.9.0', 1],
    ['2.0.0', '1.99.99', 1],
    ['0.4.10', '0.4.9', 1],
  ];
  for (const [a, b, sign] of table) {
    test(`${a} vs ${b} -> ${sign}`, () => {
      assert.equal(Math.sign(compareVersions(a, b)), sign);
      assert.equal(Math.sign(compareVersions(b, a)), -sign || 0);
      assert.equal(versionAtLeast(a, b), sign >= 0);
    });
  }

  test('throws code 6 on an unparsable operand', () => {
    assertCniError(() => compareVersions('1.0.0', 'x'), 6);
    assertCniError(() => versionAtLeast('bogus', '0.4.0'), 6);
  });

  test('property: a total order consistent with the numeric triple', () => {
    const triple = fc.tuple(fc.nat(50), fc.nat(50), fc.nat(50));
    fc.assert(
      fc.property(triple, triple, triple, (a, b, c) => {
        const s = (t: [number, number, number]) => t.join('.');
        const expected = a[0] - b[0] || a[1] - b[1] || a[2] - b[2];
        assert.equal(Math.sign(compareVersions(s(a), s(b))), Math.sign(expected));
        assert.equal(Math.sign(compareVersions(s(a), s(b))), -Math.sign(compareVersions(s(b), s(a))) || 0);
        if (compareVersions(s(a), s(b)) <= 0 && compareVersions(s(b), s(c)) <= 0) {
          assert.ok(compareVersions(s(a), s(c)) <= 0);
        }
      }),
    );
  });
});

describe('decodeVersion', () => {
  const table: Array<[string, string]> = [
    ['{"cniVersion":"0.3.1","type":"x"}', '0.3.1'],
    ['{"cniVersion":"1.1.0"}', '1.1.0'],
    ['{"type":"x"}', '0.1.0'],
    ['{"cniVersion":""}', '0.1.0'],
    ['{}', '0.1.0'],
    // decodeVersion only reads the claim; support is checked by reconcileVersion
    ['{"cniVersion":"9.9.9"}', '9.9.9'],
    ['  {"cniVersion":"0.4.0"}\n', '0.4.0'],
  ];
  for (const [bytes, expected] of table) {
    test(`${bytes.trim()} -> ${expected}`, () => {
      assert.equal(decodeVersion(bytes), expected);
    });
  }

  for (const bytes of ['', '{', 'not json', '[]', 'null', '"1.0.0"', '42', '{"cniVersion":1}', '{"cniVersion":null}', '{"cniVersion":["1.0.0"]}']) {
    test(`rejects ${JSON.stringify(bytes)} with code 6`, () => {
      assertCniError(() => decodeVersion(bytes), 6, /^decoding version from network config/);
    });
  }
});

describe('reconcileVersion', () => {
  test('accepts every version the plugin lists', () => {
    const info = pluginVersionInfo();
    for (const v of SPEC_VERSIONS) assert.doesNotThrow(() => reconcileVersion(v, info));
  });

  test('rejects an unlisted version with code 1 and details naming both sides', () => {
    const info = pluginVersionInfo(['0.4.0', '1.0.0']);
    const err = assertCniError(() => reconcileVersion('0.3.1', info), 1, 'incompatible CNI versions');
    assert.equal(err.details, 'config is "0.3.1", plugin supports ["0.4.0" "1.0.0"]');
    assertCniError(() => reconcileVersion('9.9.9', pluginVersionInfo()), 1);
    // no normalisation: "1.0" is not "1.0.0"
    assertCniError(() => reconcileVersion('1.0', pluginVersionInfo()), 1);
  });

  test('pluginVersionInfo copies its input and reports the current version', () => {
    const supported = ['0.4.0', '1.0.0'];
    const info = pluginVersionInfo(supported);
    supported.push('1.1.0');
    assert.deepEqual(info, { cniVersion: '1.1.0', supportedVersions: ['0.4.0', '1.0.0'] });
    assert.deepEqual(pluginVersionInfo().supportedVersions, [...SPEC_VERSIONS]);
  });
});

describe('highestSupported', () => {
  const table: Array<[string[], string | undefined]> = [
    [[], undefined],
    [['0.3.1', '1.0.0', '0.4.0'], '1.0.0'],
    [['1.1.0', '0.1.0'], '1.1.0'],
    [['9.9.9', '0.4.0'], '0.4.0'],
    [['9.9.9', '2.0.0'], undefined],
    [['1.0', '0.3.0'], '0.3.0'],
    [['garbage', '0.2.0'], '0.2.0'],
  ];
  for (const [input, expected] of table) {
    test(`${JSON.stringify(input)} -> ${expected}`, () => {
      assert.equal(highestSupported(input), expected);
    });
  }

  test('property: the max known version, independent of order', () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...SPEC_VERSIONS, '2.0.0', '0.5.0', 'x')), (cands) => {
        const known = cands.filter((c) => isSpecVersion(c));
        const expected = known.length ? [...known].sort(compareVersions).at(-1) : undefined;
        assert.equal(highestSupported(cands), expected);
        assert.equal(highestSupported([...cands].reverse()), expected);
      }),
    );
  });
});
