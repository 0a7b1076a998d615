import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { CniError } from './errors.js';
import { type CniArgs, formatCniArgs, parseCniArgs } from './cniArgs.js';

function parseError(text: string): CniError {
  try {
    parseCniArgs(text);
  } catch (err) {
    assert.ok(err instanceof CniError);
    return err;
  }
  assert.fail(`expected parseCniArgs(${JSON.stringify(text)}) to throw`);
}

describe('parseCniArgs', () => {
  const ok: Array<[string, CniArgs]> = [
    ['', []],
    ['a=b', [['a', 'b']]],
    [
      'a=b;c=d',
      [
        ['a', 'b'],
        ['c', 'd'],
      ],
    ],
    ['a=', [['a', '']]],
    [
      'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=nginx-7f5c',
      [
        ['IgnoreUnknown', '1'],
        ['K8S_POD_NAMESPACE', 'default'],
        ['K8S_POD_NAME', 'nginx-7f5c'],
      ],
    ],
    // order and duplicates are kept as given
    [
      'b=1;a=2;b=3',
      [
        ['b', '1'],
        ['a', '2'],
        ['b', '3'],
      ],
    ],
    ['k=v with spaces', [['k', 'v with spaces']]],
  ];
  for (const [text, expected] of ok) {
    test(`parses ${JSON.stringify(text)}`, () => {
      assert.deepEqual(parseCniArgs(text), expected);
    });
  }

  const bad = ['a', '=b', '=', 'a=b;', ';a=b', 'a=b;;c=d', 'a=b;c', ';'];
  for (const text of bad) {
    test(`rejects ${JSON.stringify(text)} with code 4`, () => {
      const err = parseError(text);
      assert.equal(err.code, 4);
      assert.match(err.msg, /^invalid CNI_ARGS pair "/);
    });
  }

  test('the message names the offending pair', () => {
    assert.equal(parseError('a=b;oops;c=d').msg, 'invalid CNI_ARGS pair "oops"');
  });

  test('a value may hold "=" (the first "=" splits)', () => {
    assert.deepEqual(parseCniArgs('TENDRIL_LABELS=app=web,tier=db;x=1=2'), [
      ['TENDRIL_LABELS', 'app=web,tier=db'],
      ['x', '1=2'],
    ]);
  });
});

describe('formatCniArgs', () => {
  test('"a=b;c=d" round trips', () => {
    const text = 'a=b;c=d';
    assert.equal(formatCniArgs(parseCniArgs(text)), text);
    assert.deepEqual(parseCniArgs(formatCniArgs([['a', 'b'], ['c', 'd']])), [
      ['a', 'b'],
      ['c', 'd'],
    ]);
  });

  test('empty list formats as the empty string', () => {
    assert.equal(formatCniArgs([]), '');
  });

  const keyChar = fc.constantFrom(...'abcXYZ_019-. '.split(''));
  const valChar = fc.constantFrom(...'abcXYZ_019-./: '.split(''));
  const key = fc.array(keyChar, { minLength: 1, maxLength: 8 }).map((a) => a.join(''));
  const val = fc.array(valChar, { maxLength: 8 }).map((a) => a.join(''));

  test('property: parse(format(args)) == args for keys/values without "=" or ";"', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(key, val), { minLength: 1, maxLength: 6 }), (args) => {
        assert.deepEqual(parseCniArgs(formatCniArgs(args)), args);
      }),
    );
  });

  test('property: format(parse(text)) == text for valid text', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(key, val), { minLength: 1, maxLength: 6 }), (args) => {
        const text = args.map(([k, v]) => `${k}=${v}`).join(';');
        assert.equal(formatCniArgs(parseCniArgs(text)), text);
      }),
    );
  });

  test('format never emits CNI_ARGS that parse to different pairs', () => {
    // A value holding ';' would smuggle in a second pair: it is refused outright.
    const smuggled: CniArgs = [['K8S_POD_NAME', 'x;IgnoreUnknown=1']];
    assert.throws(() => formatCniArgs(smuggled), (err: unknown) => err instanceof CniError && err.code === 4);
    const anyChar = fc.constantFrom(...'ab=;'.split(''));
    const s = fc.array(anyChar, { maxLength: 4 }).map((a) => a.join(''));
    fc.assert(
      fc.property(fc.array(fc.tuple(s, s), { minLength: 1, maxLength: 3 }), (args) => {
        let text: string;
        try {
          text = formatCniArgs(args);
        } catch {
          return; // refusing to format is fine
        }
        let back: CniArgs | undefined;
        try {
          back = parseCniArgs(text);
        } catch {
          back = undefined;
        }
        assert.deepEqual(back, args, `formatCniArgs(${JSON.stringify(args)}) = ${JSON.stringify(text)}`);
      }),
    );
  });
});
