import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runCli } from './testing/cliProcess.js';

describe('tendril kvstore read-only commands never create a store', () => {
  let libDir: string;
  before(() => {
    libDir = mkdtempSync(join(tmpdir(), 'tdl-cli-kv-ro-'));
  });
  after(() => rmSync(libDir, { recursive: true, force: true }));

  for (const args of [['status'], ['get', 'some/key'], ['list'], ['list', 'tendril/']]) {
    it(`kvstore ${args.join(' ')} on a lib dir without a store fails and leaves the dir empty`, async () => {
      const r = await runCli(['kvstore', ...args, '--lib-dir', libDir]);
      assert.notEqual(r.code, 0, r.stdout);
      assert.equal(r.stdout, '');
      assert.match(r.stderr, new RegExp(`no kvstore at ${join(libDir, 'kvstore', 'tendril.db')}: is this the agent's --lib-dir\\?`));
      assert.deepEqual(readdirSync(libDir), [], 'nothing created');
    });
  }

  it('embedded.path is honoured: a missing file is reported by that path', async () => {
    const path = join(libDir, 'elsewhere.db');
    const r = await runCli(['kvstore', 'status', '--kvstore-opt', `embedded.path=${path}`, '--lib-dir', libDir]);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /no kvstore at .*elsewhere\.db/);
    assert.equal(existsSync(path), false);
  });

  it('once a write created the store, status reads it', async () => {
    const set = await runCli(['kvstore', 'set', 'k', 'v', '--lib-dir', libDir]);
    assert.equal(set.code, 0, set.stderr);
    const st = await runCli(['kvstore', 'status', '--lib-dir', libDir]);
    assert.equal(st.code, 0, st.stderr);
    assert.match(st.stdout, /connected/);
  });
});
