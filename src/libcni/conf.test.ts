import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CniError, CniErrorCode } from '../cni/index.js';
import { makeScratchDir } from '../../test/support/skelFixture.js';
import { confFromBytes, confListFromBytes, injectConf, loadConfigDir, loadConfList } from './conf.js';

function expectCniError(fn: () => unknown, code: number, pattern: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof CniError, `expected CniError, got ${String(err)}`);
    assert.equal(err.code, code);
    assert.match(err.message, pattern);
    return true;
  });
}

describe('conflist parsing', () => {
  test('a valid list keeps every plugin and unknown field', () => {
    const list = confListFromBytes(
      JSON.stringify({ cniVersion: '1.0.0', name: 'n', plugins: [{ type: 'bridge', bridge: 'br9', x: { y: 1 } }, { type: 'portmap' }] }),
    );
    assert.equal(list.name, 'n');
    assert.equal(list.cniVersion, '1.0.0');
    assert.deepEqual(list.plugins[0]?.raw, { type: 'bridge', bridge: 'br9', x: { y: 1 } });
    assert.equal(list.disableCheck, false);
    assert.equal(list.disableGC, false);
  });

  test('cniVersions picks the newest version this runtime supports', () => {
    const list = confListFromBytes(JSON.stringify({ cniVersion: '0.4.0', cniVersions: ['0.3.1', '1.0.0', '9.9.9'], name: 'n', plugins: [{ type: 'a' }] }));
    assert.equal(list.cniVersion, '1.0.0');
  });

  test('disableCheck and disableGC accept booleans and Go boolean strings', () => {
    const list = confListFromBytes(JSON.stringify({ name: 'n', disableCheck: 'true', disableGC: true, plugins: [{ type: 'a' }] }));
    assert.equal(list.disableCheck, true);
    assert.equal(list.disableGC, true);
    expectCniError(() => confListFromBytes(JSON.stringify({ name: 'n', disableCheck: 'maybe', plugins: [{ type: 'a' }] })), CniErrorCode.InvalidNetworkConfig, /disableCheck/);
  });

  const bad: Array<[string, string, number, RegExp]> = [
    ['malformed JSON', '{"name":', CniErrorCode.DecodingFailure, /error parsing configuration list/],
    ['not an object', '[1]', CniErrorCode.DecodingFailure, /not a JSON object/],
    ['no name', '{"plugins":[{"type":"a"}]}', CniErrorCode.InvalidNetworkConfig, /no name/],
    ['name not a string', '{"name":3,"plugins":[{"type":"a"}]}', CniErrorCode.InvalidNetworkConfig, /invalid name type/],
    ['no plugins key', '{"name":"n"}', CniErrorCode.InvalidNetworkConfig, /no 'plugins' key/],
    ['empty plugins', '{"name":"n","plugins":[]}', CniErrorCode.InvalidNetworkConfig, /no plugins in list/],
    ['plugin without type', '{"name":"n","plugins":[{"bridge":"x"}]}', CniErrorCode.InvalidNetworkConfig, /missing 'type'/],
    ['cniVersions not strings', '{"name":"n","cniVersions":[1],"plugins":[{"type":"a"}]}', CniErrorCode.InvalidNetworkConfig, /cniVersions/],
  ];
  for (const [name, bytes, code, pattern] of bad) {
    test(`rejects ${name}`, () => expectCniError(() => confListFromBytes(bytes), code, pattern));
  }

  test('a single conf without type is rejected', () => {
    expectCniError(() => confFromBytes('{"name":"n"}'), CniErrorCode.InvalidNetworkConfig, /missing 'type'/);
  });

  test('injectConf sets keys and keeps the rest', () => {
    const conf = confFromBytes('{"type":"bridge","name":"old","keep":[1,2]}');
    const injected = injectConf(conf, { name: 'new', cniVersion: '1.1.0' });
    assert.deepEqual(injected.raw, { type: 'bridge', name: 'new', keep: [1, 2], cniVersion: '1.1.0' });
    assert.deepEqual(conf.raw, { type: 'bridge', name: 'old', keep: [1, 2] }, 'the original is not modified');
  });
});

describe('config directory loading', () => {
  let dir = '';
  let cleanup = async () => {};
  before(async () => {
    ({ dir, cleanup } = await makeScratchDir());
    await writeFile(join(dir, '30-single.conf'), JSON.stringify({ cniVersion: '0.4.0', name: 'single', type: 'bridge' }));
    await writeFile(join(dir, '10-list.conflist'), JSON.stringify({ cniVersion: '1.0.0', name: 'listed', plugins: [{ type: 'ptp' }] }));
    await writeFile(join(dir, '20-broken.conflist'), '{"name": "broken", "plugins": ');
    await writeFile(join(dir, '25-json.json'), JSON.stringify({ cniVersion: '1.0.0', name: 'listed', type: 'macvlan' }));
    await writeFile(join(dir, '40-notype.conf'), JSON.stringify({ name: 'notype' }));
    await writeFile(join(dir, 'README.md'), 'ignored');
  });
  after(() => cleanup());

  test('loads configs sorted by file name, reporting broken files without failing', async () => {
    const { configs, invalid } = await loadConfigDir(dir);
    assert.deepEqual(
      configs.map((c) => [c.file.slice(dir.length + 1), c.list.name, c.list.plugins.length]),
      [
        ['10-list.conflist', 'listed', 1],
        ['25-json.json', 'listed', 1],
        ['30-single.conf', 'single', 1],
      ],
    );
    assert.deepEqual(
      invalid.map((i) => [i.file.slice(dir.length + 1), i.error.code]),
      [
        ['20-broken.conflist', CniErrorCode.DecodingFailure],
        ['40-notype.conf', CniErrorCode.InvalidNetworkConfig],
      ],
    );
  });

  test('a single conf becomes a one-plugin list with its name and version', async () => {
    const list = await loadConfList(dir, 'single');
    assert.equal(list.cniVersion, '0.4.0');
    assert.equal(list.plugins[0]?.network.type, 'bridge');
  });

  test('a conflist wins over a single conf of the same name', async () => {
    const list = await loadConfList(dir, 'listed');
    assert.equal(list.plugins[0]?.network.type, 'ptp');
  });

  test('an unknown name is a config error naming the directory', async () => {
    await assert.rejects(loadConfList(dir, 'nope'), (err: unknown) => err instanceof CniError && err.code === CniErrorCode.InvalidNetworkConfig && err.message.includes(dir));
  });

  test('a missing directory holds no configs', async () => {
    assert.deepEqual(await loadConfigDir(join(dir, 'absent')), { configs: [], invalid: [] });
  });
});
