import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { CniError } from './errors.js';
import { type CmdArgs, dispatch, type PluginFuncs } from './skel.js';
import type { AnyResult, Result100 } from './types.js';
import { type PluginVersionInfo, pluginVersionInfo, SPEC_VERSIONS } from './version.js';

// ---- harness ------------------------------------------------------------------

interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout parsed as JSON, or undefined when empty. */
  out: Record<string, unknown> | undefined;
  stdinReads: number;
  calls: Array<{ verb: string; args: CmdArgs }>;
}

interface RunOpts {
  stdin?: string | (() => Promise<string>);
  funcs?: Partial<PluginFuncs>;
  info?: PluginVersionInfo;
  about?: string;
  addResult?: AnyResult;
}

const ADD_RESULT_110: Result100 = {
  cniVersion: '1.1.0',
  interfaces: [{ name: 'eth0', mac: '0a:58:0a:00:00:05', mtu: 1450, sandbox: '/var/run/netns/test', pciID: '0000:00:1f.6' }],
  ips: [
    { interface: 0, address: '10.0.0.5/24', gateway: '10.0.0.1' },
    { interface: 0, address: 'fd00::5/64', gateway: 'fd00::1' },
  ],
  routes: [
    { dst: '0.0.0.0/0', gw: '10.0.0.1', mtu: 1400, table: 10 },
    { dst: '::/0', gw: 'fd00::1' },
  ],
  dns: { nameservers: ['10.96.0.10'] },
};

async function run(env: Record<string, string | undefined>, opts: RunOpts = {}): Promise<RunResult> {
  let stdout = '';
  let stderr = '';
  let stdinReads = 0;
  const calls: RunResult['calls'] = [];
  const record = (verb: string) => async (args: CmdArgs) => {
    calls.push({ verb, args });
  };
  const funcs: PluginFuncs = {
    add: async (args) => {
      calls.push({ verb: 'add', args });
      return structuredClone(opts.addResult ?? ADD_RESULT_110);
    },
    del: record('del'),
    check: record('check'),
    gc: record('gc'),
    status: record('status'),
    ...opts.funcs,
  };
  const stdin = opts.stdin ?? conf('1.1.0');
  const code = await dispatch(funcs, opts.info ?? pluginVersionInfo(), opts.about ?? '', {
    env,
    readStdin: async () => {
      stdinReads++;
      return typeof stdin === 'string' ? stdin : stdin();
    },
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
  });
  const out = stdout.trim() === '' ? undefined : (JSON.parse(stdout) as Record<string, unknown>);
  return { code, stdout, stderr, out, stdinReads, calls };
}

function conf(cniVersion: string | undefined, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ ...(cniVersion === undefined ? {} : { cniVersion }), name: 'testnet', type: 'tendril', ...extra });
}

const FULL_ENV = {
  CNI_CONTAINERID: 'ctr-0123456789abcdef',
  CNI_NETNS: '/var/run/netns/test',
  CNI_IFNAME: 'eth0',
  CNI_ARGS: 'K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0',
  CNI_PATH: '/opt/cni/bin',
};
const ENV_ORDER = ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_ARGS', 'CNI_PATH'] as const;

const REQUIRED: Record<string, readonly string[]> = {
  ADD: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
  CHECK: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
  DEL: ['CNI_CONTAINERID', 'CNI_IFNAME', 'CNI_PATH'],
  GC: ['CNI_PATH'],
  STATUS: ['CNI_PATH'],
};

function env(command: string | undefined, overrides: Record<string, string | undefined> = {}): Record<string, string | undefined> {
  return { ...FULL_ENV, ...(command === undefined ? {} : { CNI_COMMAND: command }), ...overrides };
}

function assertError(r: RunResult, code: number, msg?: string | RegExp): void {
  assert.equal(r.code, 1, `exit code; stdout=${r.stdout}`);
  assert.ok(r.out, 'error JSON on stdout');
  assert.equal(r.out.code, code, `error code; stdout=${r.stdout}`);
  if (typeof msg === 'string') assert.equal(r.out.msg, msg);
  else if (msg) assert.match(String(r.out.msg), msg);
  assert.equal(r.calls.length, 0, 'plugin function must not be called');
}

// ---- environment ---------------------------------------------------------------

describe('environment validation', () => {
  for (const [verb, required] of Object.entries(REQUIRED)) {
    describe(verb, () => {
      for (const name of required) {
        for (const how of ['unset', 'empty'] as const) {
          test(`${name} ${how} -> code 4`, async () => {
            const r = await run(env(verb, { [name]: how === 'unset' ? undefined : '' }), { stdin: conf('1.1.0') });
            assertError(r, 4, `required env variables [${name}] missing`);
            assert.equal(r.stdinReads, 0, 'stdin is not read before env is valid');
          });
        }
      }

      test('all required variables missing are listed in order, joined by ","', async () => {
        const r = await run({ CNI_COMMAND: verb });
        assertError(r, 4, `required env variables [${required.join(',')}] missing`);
      });

      const optional = ENV_ORDER.filter((n) => !required.includes(n));
      test(`optional variables may be missing: ${optional.join(', ') || '(none)'}`, async () => {
        const unset = Object.fromEntries(optional.map((n) => [n, undefined]));
        const r = await run(env(verb, unset), { stdin: conf('1.1.0') });
        assert.equal(r.code, 0, r.stdout);
        assert.equal(r.calls.length, 1);
        for (const n of optional) {
          const key = { CNI_CONTAINERID: 'containerId', CNI_NETNS: 'netns', CNI_IFNAME: 'ifName', CNI_ARGS: 'args', CNI_PATH: 'path' }[n];
          assert.equal((r.calls[0]!.args as unknown as Record<string, unknown>)[key], '');
        }
      });

      test('property: any subset of missing variables is reported exactly, in order', async () => {
        await fc.assert(
          fc.asyncProperty(fc.subarray([...ENV_ORDER]), async (missing) => {
            const unset = Object.fromEntries(missing.map((n) => [n, undefined]));
            const r = await run(env(verb, unset), { stdin: conf('1.1.0') });
            const expected = ENV_ORDER.filter((n) => missing.includes(n) && required.includes(n));
            if (expected.length === 0) {
              assert.equal(r.code, 0, r.stdout);
            } else {
              assertError(r, 4, `required env variables [${expected.join(',')}] missing`);
            }
          }),
          { numRuns: 40 },
        );
      });
    });
  }

  test('CNI_NETNS is optional for DEL and passed through empty', async () => {
    const r = await run(env('DEL', { CNI_NETNS: undefined }), { stdin: conf('0.3.1') });
    assert.equal(r.code, 0, r.stdout);
    assert.equal(r.stdout, '');
    assert.equal(r.calls[0]!.verb, 'del');
    assert.equal(r.calls[0]!.args.netns, '');
  });

  test('CNI_COMMAND missing without an about string -> code 4 naming CNI_COMMAND', async () => {
    for (const cmd of [undefined, '']) {
      const r = await run(env(cmd));
      assertError(r, 4, 'required env variables [CNI_COMMAND] missing');
    }
  });

  test('CNI_COMMAND missing with an about string prints the about text to stderr and exits 0', async () => {
    const r = await run({}, { about: 'tendril CNI plugin v0.1.0', info: pluginVersionInfo(['0.4.0', '1.0.0']) });
    assert.equal(r.code, 0);
    assert.equal(r.stdout, '');
    assert.match(r.stderr, /^tendril CNI plugin v0\.1\.0\n/);
    assert.match(r.stderr, /CNI protocol versions supported: 0\.4\.0, 1\.0\.0\n$/);
  });

  for (const cmd of ['FOO', 'add', 'Add', 'VERSIONS', 'DELETE', ' ADD']) {
    test(`unknown CNI_COMMAND ${JSON.stringify(cmd)} -> code 4`, async () => {
      const r = await run(env(cmd));
      assertError(r, 4, `unknown CNI_COMMAND: ${cmd}`);
      assert.equal(r.stdinReads, 0);
    });
  }

  test('env values are passed to the plugin', async () => {
    const stdin = conf('1.0.0');
    const r = await run(env('ADD'), { stdin });
    assert.equal(r.code, 0, r.stdout);
    const a = r.calls[0]!.args;
    assert.equal(a.command, 'ADD');
    assert.equal(a.containerId, FULL_ENV.CNI_CONTAINERID);
    assert.equal(a.netns, FULL_ENV.CNI_NETNS);
    assert.equal(a.ifName, FULL_ENV.CNI_IFNAME);
    assert.equal(a.args, FULL_ENV.CNI_ARGS);
    assert.equal(a.path, FULL_ENV.CNI_PATH);
    assert.equal(a.stdinData, stdin);
    assert.equal(a.cniVersion, '1.0.0');
    assert.equal(a.conf.type, 'tendril');
    assert.equal(a.conf.name, 'testnet');
  });

  describe('CNI_CONTAINERID / CNI_IFNAME contents are validated (libcni skel)', () => {
    const cases: Array<[string, Record<string, string>]> = [
      ['ADD with CNI_IFNAME of 16 characters', { CNI_COMMAND: 'ADD', CNI_IFNAME: 'a'.repeat(16) }],
      ['ADD with CNI_IFNAME "../eth0"', { CNI_COMMAND: 'ADD', CNI_IFNAME: '../eth0' }],
      ['DEL with CNI_IFNAME ".."', { CNI_COMMAND: 'DEL', CNI_IFNAME: '..' }],
      ['ADD with CNI_CONTAINERID "ctr/../x"', { CNI_COMMAND: 'ADD', CNI_CONTAINERID: 'ctr/../x' }],
      ['CHECK with CNI_CONTAINERID " ctr"', { CNI_COMMAND: 'CHECK', CNI_CONTAINERID: ' ctr' }],
    ];
    for (const [name, overrides] of cases) {
      test(`${name} -> code 4`, async () => {
        const r = await run({ ...FULL_ENV, ...overrides }, { stdin: conf('1.1.0') });
        assertError(r, 4);
      });
    }
  });
});

// ---- VERSION ---------------------------------------------------------------------

describe('VERSION', () => {
  test('prints the version info and needs neither readable stdin nor other env', async () => {
    const info = pluginVersionInfo(['0.3.1', '0.4.0', '1.0.0', '1.1.0']);
    const r = await run(
      { CNI_COMMAND: 'VERSION' },
      {
        info,
        stdin: async () => {
          throw new Error('no stdin');
        },
      },
    );
    assert.equal(r.code, 0, r.stdout);
    assert.deepEqual(r.out, { cniVersion: '1.1.0', supportedVersions: ['0.3.1', '0.4.0', '1.0.0', '1.1.0'] });
    assert.equal(r.calls.length, 0);
  });

  test('answers with the cniVersion given on stdin (spec: VERSION Success)', async () => {
    const r = await run({ CNI_COMMAND: 'VERSION' }, { stdin: '{"cniVersion":"1.0.0"}' });
    assert.equal(r.code, 0);
    assert.equal((r.out as { cniVersion: string }).cniVersion, '1.0.0');
  });

  test('default info lists every spec version', async () => {
    const r = await run({ CNI_COMMAND: 'VERSION' }, { stdin: 'not json at all' });
    assert.equal(r.code, 0);
    assert.deepEqual(r.out, { cniVersion: '1.1.0', supportedVersions: [...SPEC_VERSIONS] });
  });
});

// ---- the network config ----------------------------------------------------------

describe('network config on stdin', () => {
  for (const verb of ['ADD', 'DEL', 'CHECK', 'GC', 'STATUS']) {
    for (const bad of ['', '{', 'not json', '{"type":"x",}', '[]', 'null', '"str"', '42']) {
      test(`${verb}: malformed config ${JSON.stringify(bad)} -> code 6`, async () => {
        const r = await run(env(verb), { stdin: bad });
        assertError(r, 6);
      });
    }

    for (const stdin of [JSON.stringify({ cniVersion: '1.1.0', name: 'n' }), conf('1.1.0', { type: '' })]) {
      test(`${verb}: missing type ${stdin} -> code 7`, async () => {
        const r = await run(env(verb), { stdin });
        assertError(r, 7, 'missing network type');
      });
    }

    test(`${verb}: unsupported cniVersion -> code 1 with details`, async () => {
      const r = await run(env(verb), { stdin: conf('9.9.9') });
      assertError(r, 1, 'incompatible CNI versions');
      assert.equal(r.out!.details, `config is "9.9.9", plugin supports [${SPEC_VERSIONS.map((v) => `"${v}"`).join(' ')}]`);
    });
  }

  test('a version the plugin does not list -> code 1, details list the plugin versions', async () => {
    const r = await run(env('ADD'), { stdin: conf('0.3.1'), info: pluginVersionInfo(['1.0.0', '1.1.0']) });
    assertError(r, 1, 'incompatible CNI versions');
    assert.equal(r.out!.details, 'config is "0.3.1", plugin supports ["1.0.0" "1.1.0"]');
  });

  test('a config without cniVersion is 0.1.0', async () => {
    const r = await run(env('ADD'), { stdin: conf(undefined) });
    assert.equal(r.code, 0, r.stdout);
    assert.equal(r.calls[0]!.args.cniVersion, '0.1.0');
    assert.equal(r.out!.cniVersion, '0.1.0');
    const r2 = await run(env('ADD'), { stdin: conf(undefined), info: pluginVersionInfo(['1.0.0']) });
    assertError(r2, 1);
  });

  test('stdin read failure -> code 5', async () => {
    const r = await run(env('ADD'), {
      stdin: async () => {
        throw new Error('EPIPE');
      },
    });
    assertError(r, 5, /EPIPE/);
  });

  test('unknown config fields are passed through to the plugin', async () => {
    const r = await run(env('ADD'), { stdin: conf('1.1.0', { mtu: 9000, ipam: { type: 'host-local', subnet: '10.0.0.0/24' } }) });
    assert.equal(r.code, 0, r.stdout);
    assert.equal(r.calls[0]!.args.conf.mtu, 9000);
    assert.deepEqual(r.calls[0]!.args.conf.ipam, { type: 'host-local', subnet: '10.0.0.0/24' });
  });
});

describe('verbs gated by config version', () => {
  for (const v of ['0.1.0', '0.2.0', '0.3.0', '0.3.1']) {
    test(`CHECK with a ${v} config -> code 1`, async () => {
      const r = await run(env('CHECK'), { stdin: conf(v) });
      assertError(r, 1, 'config version does not allow CHECK');
    });
  }
  test('CHECK with no cniVersion (0.1.0) -> code 1', async () => {
    assertError(await run(env('CHECK'), { stdin: conf(undefined) }), 1);
  });
  for (const v of ['0.4.0', '1.0.0', '1.1.0']) {
    test(`CHECK with a ${v} config calls check`, async () => {
      const r = await run(env('CHECK'), { stdin: conf(v) });
      assert.equal(r.code, 0, r.stdout);
      assert.equal(r.stdout, '');
      assert.deepEqual(
        r.calls.map((c) => c.verb),
        ['check'],
      );
    });
  }

  for (const verb of ['GC', 'STATUS']) {
    for (const v of ['0.1.0', '0.2.0', '0.3.0', '0.3.1', '0.4.0', '1.0.0']) {
      test(`${verb} with a ${v} config -> code 1`, async () => {
        const r = await run(env(verb), { stdin: conf(v) });
        assertError(r, 1, `config version does not allow ${verb}`);
      });
    }
    test(`${verb} with a 1.1.0 config calls ${verb.toLowerCase()}`, async () => {
      const r = await run({ CNI_COMMAND: verb, CNI_PATH: '/opt/cni/bin' }, { stdin: conf('1.1.0') });
      assert.equal(r.code, 0, r.stdout);
      assert.equal(r.stdout, '');
      assert.deepEqual(
        r.calls.map((c) => c.verb),
        [verb.toLowerCase()],
      );
    });
    test(`${verb} without a handler succeeds`, async () => {
      const r = await run(env(verb), { stdin: conf('1.1.0'), funcs: { [verb.toLowerCase()]: undefined } });
      assert.equal(r.code, 0, r.stdout);
    });
  }
});

// ---- ADD output ----------------------------------------------------------------

describe('ADD prints the result in the config version', () => {
  test('1.1.0 result, 0.3.1 config -> printed as 0.3.1 with ips[].version', async () => {
    const r = await run(env('ADD'), { stdin: conf('0.3.1') });
    assert.equal(r.code, 0, r.stdout);
    assert.deepEqual(r.out, {
      cniVersion: '0.3.1',
      interfaces: [{ name: 'eth0', mac: '0a:58:0a:00:00:05', sandbox: '/var/run/netns/test' }],
      ips: [
        { version: '4', interface: 0, address: '10.0.0.5/24', gateway: '10.0.0.1' },
        { version: '6', interface: 0, address: 'fd00::5/64', gateway: 'fd00::1' },
      ],
      routes: [
        { dst: '0.0.0.0/0', gw: '10.0.0.1' },
        { dst: '::/0', gw: 'fd00::1' },
      ],
      dns: { nameservers: ['10.96.0.10'] },
    });
  });

  test('1.1.0 result, 0.2.0 config -> ip4/ip6', async () => {
    const r = await run(env('ADD'), { stdin: conf('0.2.0') });
    assert.equal(r.code, 0, r.stdout);
    assert.deepEqual(r.out, {
      cniVersion: '0.2.0',
      ip4: { ip: '10.0.0.5/24', gateway: '10.0.0.1', routes: [{ dst: '0.0.0.0/0', gw: '10.0.0.1' }] },
      ip6: { ip: 'fd00::5/64', gateway: 'fd00::1', routes: [{ dst: '::/0', gw: 'fd00::1' }] },
      dns: { nameservers: ['10.96.0.10'] },
    });
  });

  test('1.1.0 result, 1.1.0 config -> unchanged; 1.0.0 config -> relabelled', async () => {
    const r = await run(env('ADD'), { stdin: conf('1.1.0') });
    assert.deepEqual(r.out, ADD_RESULT_110);
    const r2 = await run(env('ADD'), { stdin: conf('1.0.0') });
    assert.deepEqual(r2.out, { ...ADD_RESULT_110, cniVersion: '1.0.0' });
  });

  test('0.4.0 result, 1.1.0 config -> converted up', async () => {
    const r = await run(env('ADD'), {
      stdin: conf('1.1.0'),
      addResult: { cniVersion: '0.4.0', ips: [{ version: '4', address: '10.0.0.9/24' }] },
    });
    assert.equal(r.code, 0, r.stdout);
    assert.deepEqual(r.out, { cniVersion: '1.1.0', ips: [{ address: '10.0.0.9/24' }] });
  });

  for (const v of SPEC_VERSIONS) {
    test(`printed cniVersion is the config's (${v})`, async () => {
      const r = await run(env('ADD'), { stdin: conf(v) });
      assert.equal(r.code, 0, r.stdout);
      assert.equal(r.out!.cniVersion, v);
    });
  }

  test('a result that cannot be expressed in the config version -> code 1', async () => {
    const r = await run(env('ADD'), { stdin: conf('0.2.0'), addResult: { cniVersion: '1.1.0', interfaces: [{ name: 'eth0' }] } });
    assert.equal(r.code, 1);
    assert.equal(r.out!.code, 1);
    assert.match(String(r.out!.msg), /no valid IP addresses/);
  });
});

// ---- errors from the plugin --------------------------------------------------------

describe('plugin failures', () => {
  for (const verb of ['ADD', 'DEL', 'CHECK', 'GC', 'STATUS']) {
    const key = verb.toLowerCase() as keyof PluginFuncs;
    test(`${verb}: a thrown CniError is printed as error JSON, exit 1`, async () => {
      const r = await run(env(verb), {
        stdin: conf('1.1.0'),
        funcs: {
          [key]: async () => {
            throw new CniError(11, 'try again later', 'ipam busy');
          },
        },
      });
      assert.equal(r.code, 1);
      assert.deepEqual(r.out, { cniVersion: '1.1.0', code: 11, msg: 'try again later', details: 'ipam busy' });
    });

    test(`${verb}: a plain Error becomes code 999 with its message`, async () => {
      const r = await run(env(verb), {
        stdin: conf('1.1.0'),
        funcs: {
          [key]: async () => {
            throw new Error('boom');
          },
        },
      });
      assert.equal(r.code, 1);
      assert.deepEqual(r.out, { cniVersion: '1.1.0', code: 999, msg: 'boom' });
    });
  }

  test('a thrown non-Error becomes code 999', async () => {
    const r = await run(env('DEL'), {
      stdin: conf('1.0.0'),
      funcs: {
        del: async () => {
          throw 'string failure';
        },
      },
    });
    assert.equal(r.code, 1);
    assert.equal(r.out!.code, 999);
    assert.equal(r.out!.msg, 'string failure');
  });

  test('error JSON carries the config cniVersion once it is known', async () => {
    const r = await run(env('ADD'), {
      stdin: conf('0.4.0'),
      funcs: {
        add: async () => {
          throw new CniError(7, 'bad ipam');
        },
      },
    });
    assert.deepEqual(r.out, { cniVersion: '0.4.0', code: 7, msg: 'bad ipam' });
  });

  test('error output is the only output, one JSON document', async () => {
    const r = await run(env('ADD', { CNI_PATH: '' }));
    assert.equal(r.code, 1);
    assert.doesNotThrow(() => JSON.parse(r.stdout));
    assert.equal(r.stderr, '');
  });
});

// ---- prevResult / GC attachments -----------------------------------------------------

describe('prevResult', () => {
  test('a 0.4.0 prevResult is parsed and normalised to 1.1.0', async () => {
    const prevResult = {
      cniVersion: '0.4.0',
      interfaces: [{ name: 'eth0', sandbox: '/var/run/netns/test' }],
      ips: [
        { version: '4', interface: 0, address: '10.0.0.5/24', gateway: '10.0.0.1' },
        { version: '6', interface: 0, address: 'fd00::5/64' },
      ],
      routes: [{ dst: '0.0.0.0/0', gw: '10.0.0.1' }],
    };
    const r = await run(env('CHECK'), { stdin: conf('0.4.0', { prevResult }) });
    assert.equal(r.code, 0, r.stdout);
    assert.deepEqual(r.calls[0]!.args.prevResult, {
      cniVersion: '1.1.0',
      interfaces: [{ name: 'eth0', sandbox: '/var/run/netns/test' }],
      ips: [
        { interface: 0, address: '10.0.0.5/24', gateway: '10.0.0.1' },
        { interface: 0, address: 'fd00::5/64' },
      ],
      routes: [{ dst: '0.0.0.0/0', gw: '10.0.0.1' }],
    });
  });

  test('a 1.0.0 prevResult on ADD (chained plugin) is relabelled to 1.1.0', async () => {
    const prevResult = { cniVersion: '1.0.0', ips: [{ address: '10.1.0.2/16' }] };
    const r = await run(env('ADD'), { stdin: conf('1.0.0', { prevResult }) });
    assert.equal(r.code, 0, r.stdout);
    assert.deepEqual(r.calls[0]!.args.prevResult, { cniVersion: '1.1.0', ips: [{ address: '10.1.0.2/16' }] });
  });

  test('the prevResult is read in the config version', async () => {
    // a 0.3.1 config's prevResult has the 0.3.x shape whatever it claims
    const prevResult = { cniVersion: '0.3.1', ips: [{ version: '6', address: 'fd00::7/64' }] };
    const r = await run(env('ADD'), { stdin: conf('0.3.1', { prevResult }) });
    assert.equal(r.code, 0, r.stdout);
    assert.deepEqual(r.calls[0]!.args.prevResult, { cniVersion: '1.1.0', ips: [{ address: 'fd00::7/64' }] });
  });

  test('no prevResult -> undefined', async () => {
    const r = await run(env('ADD'), { stdin: conf('1.1.0') });
    assert.equal(r.calls[0]!.args.prevResult, undefined);
  });

  for (const [name, prevResult] of [
    ['bad CIDR', { cniVersion: '1.0.0', ips: [{ address: '10.0.0.1' }] }],
    ['bad gateway', { cniVersion: '1.0.0', ips: [{ address: '10.0.0.1/24', gateway: 'nope' }] }],
    ['missing version tag in 0.4.0 shape', { cniVersion: '0.4.0', ips: [{ address: '10.0.0.1/24' }] }],
  ] as const) {
    test(`invalid prevResult (${name}) -> code 6`, async () => {
      const v = prevResult.cniVersion;
      const r = await run(env('CHECK'), { stdin: conf(v, { prevResult }) });
      assertError(r, 6, 'could not parse prevResult');
    });
  }
});

describe('GC valid attachments', () => {
  test('cni.dev/valid-attachments is parsed', async () => {
    const attachments = [
      { containerID: 'ctr-1', ifname: 'eth0' },
      { containerID: 'ctr-2', ifname: 'net1' },
    ];
    const r = await run({ CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' }, { stdin: conf('1.1.0', { 'cni.dev/valid-attachments': attachments }) });
    assert.equal(r.code, 0, r.stdout);
    assert.deepEqual(r.calls[0]!.args.validAttachments, attachments);
  });

  test('no attachments -> empty list', async () => {
    const r = await run(env('GC'), { stdin: conf('1.1.0') });
    assert.equal(r.code, 0, r.stdout);
    assert.deepEqual(r.calls[0]!.args.validAttachments, []);
  });

  test('only GC gets validAttachments', async () => {
    const r = await run(env('ADD'), { stdin: conf('1.1.0', { 'cni.dev/valid-attachments': [] }) });
    assert.equal(r.calls[0]!.args.validAttachments, undefined);
  });

  for (const bad of [{}, 'ctr-1', [{ containerID: 'ctr-1' }], [{ containerID: 1, ifname: 'eth0' }], [null]]) {
    test(`malformed attachments ${JSON.stringify(bad)} -> code 7`, async () => {
      const r = await run(env('GC'), { stdin: conf('1.1.0', { 'cni.dev/valid-attachments': bad }) });
      assertError(r, 7);
    });
  }
});
