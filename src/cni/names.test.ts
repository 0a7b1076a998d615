import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { CniError } from './errors.js';
import {
  MAX_IFNAME_LENGTH,
  validateAbsolutePath,
  validateContainerId,
  validateInterfaceName,
  validateNetworkName,
} from './names.js';

function codeOf(fn: () => void): number | undefined {
  try {
    fn();
    return undefined;
  } catch (err) {
    assert.ok(err instanceof CniError, `expected a CniError, got ${String(err)}`);
    return err.code;
  }
}

function msgOf(fn: () => void): string | undefined {
  try {
    fn();
    return undefined;
  } catch (err) {
    return (err as CniError).msg;
  }
}

const ID_FIRST = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
const ID_REST = `${ID_FIRST}_.-`;

describe('validateContainerId', () => {
  const good = [
    'a',
    '0',
    'Z',
    'abc123',
    'a_b.c-d',
    '0-',
    'a.',
    'a..b',
    'f'.repeat(64),
    'x'.repeat(1024),
    'ctr_1.2-3',
  ];
  for (const id of good) {
    test(`accepts ${JSON.stringify(id.length > 20 ? `${id.slice(0, 10)}…(${id.length})` : id)}`, () => {
      assert.doesNotThrow(() => validateContainerId(id));
    });
  }

  const bad = ['_a', '.a', '-a', '.', '..', 'a b', ' a', 'a ', 'a/b', 'a:b', 'a\nb', 'abc\n', 'a\tb', 'a;b', 'a=b', 'ä', 'a$', 'a*', 'a\0'];
  for (const id of bad) {
    test(`rejects ${JSON.stringify(id)} with code 4`, () => {
      assert.equal(codeOf(() => validateContainerId(id)), 4);
      assert.equal(msgOf(() => validateContainerId(id)), 'invalid characters in containerID');
    });
  }

  test('rejects the empty id', () => {
    assert.notEqual(codeOf(() => validateContainerId('')), undefined);
    assert.equal(msgOf(() => validateContainerId('')), 'missing containerID');
  });

  test('property: accepted iff [a-zA-Z0-9][a-zA-Z0-9_.-]*', () => {
    const chars = fc.constantFrom(...`${ID_REST} /:;\n\tä`.split(''));
    fc.assert(
      fc.property(fc.array(chars, { maxLength: 12 }).map((a) => a.join('')), (id) => {
        const expected = id.length > 0 && ID_FIRST.includes(id[0]!) && [...id].every((c) => ID_REST.includes(c));
        assert.equal(codeOf(() => validateContainerId(id)) === undefined, expected, JSON.stringify(id));
      }),
    );
  });
});

describe('validateNetworkName', () => {
  for (const name of ['net', 'my-net_1.0', '0', 'A']) {
    test(`accepts ${name}`, () => assert.doesNotThrow(() => validateNetworkName(name)));
  }
  for (const name of ['', '-net', '.net', 'my net', 'a/b', 'a:b', 'net\n']) {
    test(`rejects ${JSON.stringify(name)} with code 7`, () => {
      assert.equal(codeOf(() => validateNetworkName(name)), 7);
    });
  }
});

describe('validateInterfaceName', () => {
  test('IFNAMSIZ: 15 characters is the maximum', () => {
    assert.equal(MAX_IFNAME_LENGTH, 15);
    assert.doesNotThrow(() => validateInterfaceName('a'.repeat(15)));
    assert.doesNotThrow(() => validateInterfaceName('eth0123456789ab'));
    assert.equal(codeOf(() => validateInterfaceName('a'.repeat(16))), 4);
    assert.equal(msgOf(() => validateInterfaceName('a'.repeat(16))), 'interface name is too long');
    assert.equal(codeOf(() => validateInterfaceName('a'.repeat(100))), 4);
  });

  const good = ['eth0', 'e', 'veth1234abcd', 'lo', '...', '.a', 'a.', '-', '_', 'eth0.100', 'br-1', 'a@b', 'ä'];
  for (const name of good) {
    test(`accepts ${JSON.stringify(name)}`, () => assert.doesNotThrow(() => validateInterfaceName(name)));
  }

  const bad: Array<[string, string]> = [
    ['', 'interface name is empty'],
    ['.', 'interface name is . or ..'],
    ['..', 'interface name is . or ..'],
    ['/', 'interface name contains / or : or whitespace characters'],
    ['eth/0', 'interface name contains / or : or whitespace characters'],
    ['../etc', 'interface name contains / or : or whitespace characters'],
    ['eth0:1', 'interface name contains / or : or whitespace characters'],
    [':', 'interface name contains / or : or whitespace characters'],
    [' ', 'interface name contains / or : or whitespace characters'],
    ['eth 0', 'interface name contains / or : or whitespace characters'],
    ['eth0\t', 'interface name contains / or : or whitespace characters'],
    ['eth0\n', 'interface name contains / or : or whitespace characters'],
    ['\reth0', 'interface name contains / or : or whitespace characters'],
    ['eth\v0', 'interface name contains / or : or whitespace characters'],
    ['eth\f0', 'interface name contains / or : or whitespace characters'],
    ['eth\u00a00', 'interface name contains / or : or whitespace characters'],
    ['eth\u20030', 'interface name contains / or : or whitespace characters'],
    ['eth\u30000', 'interface name contains / or : or whitespace characters'],
  ];
  for (const [name, msg] of bad) {
    test(`rejects ${JSON.stringify(name)} with code 4`, () => {
      assert.equal(codeOf(() => validateInterfaceName(name)), 4);
      assert.equal(msgOf(() => validateInterfaceName(name)), msg);
    });
  }

  test('IFNAMSIZ is a byte limit: 8 x "é" (16 UTF-8 bytes) is too long', () => {
    const name = 'é'.repeat(8);
    assert.equal(Buffer.byteLength(name), 16);
    assert.equal(codeOf(() => validateInterfaceName(name)), 4);
  });

  test('U+0085 (NEL) counts as whitespace', () => {
    assert.equal(codeOf(() => validateInterfaceName('eth\u00850')), 4);
  });

  test('property: short names of safe ASCII are accepted', () => {
    const safe = fc.constantFrom(...`${ID_REST}@+`.split(''));
    fc.assert(
      fc.property(fc.array(safe, { minLength: 1, maxLength: 15 }).map((a) => a.join('')), (name) => {
        fc.pre(name !== '.' && name !== '..');
        assert.doesNotThrow(() => validateInterfaceName(name));
      }),
    );
  });

  test('property: any name containing / : or ASCII whitespace is rejected', () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 7 }),
        fc.constantFrom('/', ':', ' ', '\t', '\n', '\r', '\v', '\f'),
        fc.string({ maxLength: 7 }),
        (a, c, b) => {
          assert.equal(codeOf(() => validateInterfaceName(`${a}${c}${b}`)), 4);
        },
      ),
    );
  });
});

describe('validateAbsolutePath', () => {
  const good = ['/', '/var/run/netns/cni-1234', '/proc/42/ns/net', '/a/..b', '/a/b..', '/a/.../b', '/a/./b', '//double', '/trailing/'];
  for (const p of good) {
    test(`accepts ${JSON.stringify(p)}`, () => assert.doesNotThrow(() => validateAbsolutePath(p, 'netns')));
  }

  const bad = ['', 'relative', './x', '../x', 'var/run', '/a/../b', '/..', '/a/..', '/../etc/passwd', '/a\0b', ' /a'];
  for (const p of bad) {
    test(`rejects ${JSON.stringify(p)} with code 4 by default`, () => {
      assert.equal(codeOf(() => validateAbsolutePath(p, 'netns')), 4);
      assert.equal(msgOf(() => validateAbsolutePath(p, 'netns')), "invalid netns: must be an absolute path without '..'");
    });
  }

  test('uses the given error code and carries the path in details', () => {
    try {
      validateAbsolutePath('x/y', 'socket path', 7);
      assert.fail('expected a throw');
    } catch (err) {
      assert.ok(err instanceof CniError);
      assert.equal(err.code, 7);
      assert.equal(err.msg, "invalid socket path: must be an absolute path without '..'");
      assert.equal(err.details, 'x/y');
    }
  });
});
