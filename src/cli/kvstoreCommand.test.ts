import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runCli } from './testing/cliProcess.js';
import { startEtcd, type EtcdHarness } from '../../test/support/etcdHarness.js';
import { runChild, waitForLine } from '../kvstore/testing/childProcess.js';

const tendril = runCli;

describe('tendril kvstore (embedded)', () => {
  let stateDir: string;
  let flags: string[];
  before(() => {
    stateDir = mkdtempSync(join(tmpdir(), 'tendril-cli-kv-'));
    flags = ['--lib-dir', stateDir];
  });
  after(() => rmSync(stateDir, { recursive: true, force: true }));

  it('set, get, list and delete round-trip; -o json prints revisions and leases', async () => {
    const set = await tendril(['kvstore', 'set', 'tendril/state/nodes/v1/n1', '{"ip":"10.0.0.1"}', '-o', 'json', ...flags]);
    assert.equal(set.code, 0, set.stderr);
    const setJson = JSON.parse(set.stdout) as { revision: number; kv: { version: number; lease: string } };
    assert.equal(setJson.kv.version, 1);
    assert.ok(setJson.revision > 0);

    const leased = await tendril(['kvstore', 'set', 'tendril/state/nodes/v1/n2', 'x', '--ttl', '60', '-o', 'json', ...flags]);
    assert.equal(leased.code, 0, leased.stderr);
    assert.notEqual((JSON.parse(leased.stdout) as { kv: { lease: string } }).kv.lease, '0');

    const get = await tendril(['kvstore', 'get', 'tendril/state/nodes/v1/n1', ...flags]);
    assert.equal(get.stdout, 'tendril/state/nodes/v1/n1 => {"ip":"10.0.0.1"}\n');

    const list = await tendril(['kvstore', 'list', 'tendril/state/nodes/', '-o', 'json', ...flags]);
    const listJson = JSON.parse(list.stdout) as { revision: number; kvs: { key: string; modRevision: number }[] };
    assert.deepEqual(listJson.kvs.map((k) => k.key), ['tendril/state/nodes/v1/n1', 'tendril/state/nodes/v1/n2']);

    const del = await tendril(['kvstore', 'delete', 'tendril/state/nodes/', '--prefix', '-o', 'json', ...flags]);
    assert.equal((JSON.parse(del.stdout) as { deleted: number }).deleted, 2);
    const gone = await tendril(['kvstore', 'get', 'tendril/state/nodes/v1/n1', ...flags]);
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, /not found/);
  });

  it('bad input exits non-zero with a message', async () => {
    const cases: [string[], RegExp][] = [
      [['kvstore', 'set', '', 'v', ...flags], /KVSTORE_INVALID_KEY/],
      [['kvstore', 'get', 'k', '--kvstore', 'consul', ...flags], /KVSTORE_UNKNOWN_BACKEND/],
      [['kvstore', 'get', 'k', '--kvstore-opt', 'nonsense', ...flags], /KVSTORE_INVALID_OPTION/],
      [['kvstore', 'get', 'k', '--kvstore-opt', 'etcd.endpoints=http://127.0.0.1:1', ...flags], /KVSTORE_INVALID_OPTION/],
      [['kvstore', 'set', 'k', 'v', '--ttl', '0', ...flags], /--ttl/],
      [['kvstore', 'get', 'k', '--kvstore', 'etcd', ...flags], /needs endpoints/],
      [['kvstore', 'get', 'k', '-o', 'yaml', ...flags], /Allowed choices/],
    ];
    for (const [args, message] of cases) {
      const r = await tendril(args);
      assert.notEqual(r.code, 0, `${args.join(' ')} succeeded`);
      assert.match(r.stderr, message, args.join(' '));
    }
  });

  it('refuses to open a store another process holds', async () => {
    const holder = runChild(['hold', join(stateDir, 'kvstore', 'tendril.db')]);
    try {
      await waitForLine(holder, (l) => l === 'ready');
      const r = await tendril(['kvstore', 'list', ...flags]);
      assert.equal(r.code, 1);
      assert.match(r.stderr, new RegExp(`KVSTORE_LOCKED: .*pid ${holder.child.pid}`));
    } finally {
      holder.child.kill('SIGKILL');
      await holder.exited;
    }
  });
});

describe('tendril kvstore (etcd)', () => {
  let etcd: EtcdHarness;
  before(async () => {
    etcd = await startEtcd();
  });
  after(async () => {
    await etcd?.destroy();
  });

  it('reads and writes etcd through --kvstore-opt etcd.endpoints', async () => {
    const flags = ['--kvstore', 'etcd', '--kvstore-opt', `etcd.endpoints=${etcd.endpoint}`];
    const set = await tendril(['kvstore', 'set', 'tendril/ipam/v1/blocks/10.0.0.0/26', 'node-a', ...flags]);
    assert.equal(set.code, 0, set.stderr);
    const get = await tendril(['kvstore', 'get', 'tendril/ipam/v1/blocks/10.0.0.0/26', '-o', 'json', ...flags]);
    assert.equal((JSON.parse(get.stdout) as { value: string }).value, 'node-a');
    const st = await tendril(['kvstore', 'status', ...flags]);
    assert.match(st.stdout, /^etcd: connected, revision \d+/);
  });

  it('an unreachable etcd exits non-zero with KVSTORE_UNAVAILABLE', async () => {
    const r = await tendril([
      'kvstore', 'get', 'k', '--kvstore', 'etcd',
      '--kvstore-opt', 'etcd.endpoints=http://127.0.0.1:1',
      '--kvstore-opt', 'etcd.retryTimeout=1s',
    ]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /KVSTORE_UNAVAILABLE: etcd at http:\/\/127\.0\.0\.1:1 is unavailable/);
  });
});
