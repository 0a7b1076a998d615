// tendril-cni answers VERSION (and a bare run) by itself, without the agent.
// Its answer must be byte for byte what the TypeScript skel, which the agent
// still runs for every other verb, would print for the same stdin.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { SUPPORTED_CNI_VERSIONS } from '../api/types.js';
import { dispatch, type PluginFuncs } from '../cni/skel.js';
import { CURRENT_VERSION, pluginVersionInfo } from '../cni/version.js';
import { runRelay } from './testing/runRelay.js';

const unused = async (): Promise<never> => {
  throw new Error('VERSION must not call a verb');
};
const NO_VERBS: PluginFuncs = { add: unused, del: unused };

/** What the skel prints for VERSION with this stdin (stdin bytes decoded as Node decodes them). */
async function skelVersion(stdin: Buffer): Promise<string> {
  let out = '';
  const code = await dispatch(NO_VERBS, pluginVersionInfo(SUPPORTED_CNI_VERSIONS), '', {
    env: { CNI_COMMAND: 'VERSION' },
    readStdin: async () => stdin.toString('utf8'),
    stdout: { write: (s: string) => (out += s) },
    stderr: { write: () => undefined },
  });
  assert.equal(code, 0);
  return out;
}

async function assertSameAsSkel(stdin: Buffer): Promise<void> {
  const r = await runRelay({ CNI_COMMAND: 'VERSION' }, stdin);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, await skelVersion(stdin), `stdin: ${JSON.stringify(stdin.toString('latin1'))}`);
}

describe('VERSION', () => {
  test('lists exactly the versions src/api/types.ts declares, and answers the newest without stdin', async () => {
    const r = await runRelay({ CNI_COMMAND: 'VERSION' });
    assert.equal(r.code, 0);
    assert.deepEqual(r.out, { cniVersion: CURRENT_VERSION, supportedVersions: SUPPORTED_CNI_VERSIONS });
    assert.equal(SUPPORTED_CNI_VERSIONS.at(-1), CURRENT_VERSION, 'the newest supported version is the current one');
    assert.equal(r.stdout, `${JSON.stringify({ cniVersion: CURRENT_VERSION, supportedVersions: SUPPORTED_CNI_VERSIONS })}\n`);
  });

  test('echoes the input cniVersion, also one tendril does not support, as the skel does', async () => {
    for (const v of [...SUPPORTED_CNI_VERSIONS, '0.1.0', '0.2.0', '9.99.123']) {
      const r = await runRelay({ CNI_COMMAND: 'VERSION' }, JSON.stringify({ cniVersion: v, name: 'n', type: 'tendril-cni' }));
      assert.equal(r.out?.cniVersion, v);
    }
  });

  const cases: Array<[string, string | Buffer]> = [
    ['no stdin', ''],
    ['blank stdin', ' \n\t'],
    ['garbage', 'this is not JSON'],
    ['truncated JSON', '{"cniVersion":"1.0.0"'],
    ['an array', '[{"cniVersion":"1.0.0"}]'],
    ['null', 'null'],
    ['a number as cniVersion', '{"cniVersion":100}'],
    ['an empty cniVersion', '{"cniVersion":""}'],
    ['a version of two parts', '{"cniVersion":"1.0"}'],
    ['a version with a suffix', '{"cniVersion":"1.0.0-rc1"}'],
    ['a version with a trailing newline', '{"cniVersion":"1.0.0\\n"}'],
    ['a cniVersion only in a nested object', '{"plugins":[{"cniVersion":"0.4.0"}]}'],
    ['an escaped key and value', '{"cni\\u0056ersion":"\\u0030.4.0"}'],
    ['duplicate keys: the last wins', '{"cniVersion":"0.3.0","cniVersion":"0.3.1"}'],
    ['duplicate keys, the last not a string', '{"cniVersion":"0.3.0","cniVersion":null}'],
    ['a byte-order mark', Buffer.from('\ufeff{"cniVersion":"1.0.0"}', 'utf8')],
    ['invalid UTF-8 inside a string', Buffer.concat([Buffer.from('{"name":"'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('","cniVersion":"0.4.0"}')])],
    ['a raw control character in a string', '{"name":"a\u0001","cniVersion":"0.4.0"}'],
    ['a trailing comma', '{"cniVersion":"0.4.0",}'],
    ['leading zeros', '{"n":01,"cniVersion":"0.4.0"}'],
    ['numbers in every form', '{"a":-0,"b":1.5e+3,"c":2E-2,"d":0.0,"cniVersion":"0.4.0"}'],
    ['a lone surrogate', '{"s":"\\ud800","cniVersion":"0.4.0"}'],
    ['deep nesting', `{"a":${'['.repeat(5000)}${']'.repeat(5000)},"cniVersion":"0.4.0"}`],
    ['two documents', '{"cniVersion":"0.4.0"} {}'],
    ['a long version', `{"cniVersion":"1.0.${'0'.repeat(300)}"}`],
  ];
  for (const [what, stdin] of cases) {
    test(`${what}: the same answer as the skel`, async () => {
      await assertSameAsSkel(Buffer.isBuffer(stdin) ? stdin : Buffer.from(stdin, 'utf8'));
    });
  }

  test('stdin beyond the 1 MiB limit is not read: the newest version', async () => {
    const big = JSON.stringify({ cniVersion: '0.4.0', pad: 'x'.repeat(1024 * 1024) });
    const r = await runRelay({ CNI_COMMAND: 'VERSION' }, big);
    assert.equal(r.code, 0);
    assert.equal(r.out?.cniVersion, CURRENT_VERSION);
  });

  test('random documents and near-documents: the same answer as the skel', async () => {
    const version = fc.oneof(fc.constantFrom(...SUPPORTED_CNI_VERSIONS, '0.1.0', '10.20.30', '1.0', ''), fc.string({ maxLength: 8 }));
    const doc = fc
      .tuple(fc.dictionary(fc.string({ maxLength: 6 }), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 4 }), fc.option(version), fc.boolean())
      .map(([obj, v, first]) => {
        if (v === null) return JSON.stringify(obj);
        return JSON.stringify(first ? { cniVersion: v, ...obj } : { ...obj, cniVersion: v });
      });
    // A valid document with one byte changed, dropped or doubled: mostly invalid, sometimes not.
    const mutated = fc.tuple(doc, fc.nat(), fc.integer({ min: 0, max: 255 }), fc.constantFrom('set', 'drop', 'dup')).map(([d, at, byte, how]) => {
      const b = Buffer.from(d, 'utf8');
      const i = at % b.length;
      if (how === 'drop') return Buffer.concat([b.subarray(0, i), b.subarray(i + 1)]);
      if (how === 'dup') return Buffer.concat([b.subarray(0, i + 1), b.subarray(i)]);
      const c = Buffer.from(b);
      c[i] = byte;
      return c;
    });
    await fc.assert(
      fc.asyncProperty(fc.oneof(doc.map((d) => Buffer.from(d, 'utf8')), mutated, fc.uint8Array({ maxLength: 40 }).map((a) => Buffer.from(a))), assertSameAsSkel),
      { numRuns: 300 },
    );
  });
});

describe('run by hand', () => {
  test('without CNI_COMMAND it says what it is on stderr and exits 0, like the skel', async () => {
    for (const env of [{}, { CNI_COMMAND: '' }]) {
      const r = await runRelay(env);
      assert.equal(r.code, 0);
      assert.equal(r.stdout, '');
      assert.equal(r.stderr, `tendril-cni: CNI plugin of the tendril node agent\nCNI protocol versions supported: ${SUPPORTED_CNI_VERSIONS.join(', ')}\n`);
    }
  });
});
