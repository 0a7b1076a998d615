import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { createLogger } from '../logging/logger.js';
import { KvstoreErrorCode } from './errors.js';
import { rejectsWithCode } from './contract.js';
import { openBackend, parseKvstoreOpts } from './factory.js';
import { parseEtcdOptions } from './etcd/etcdOptions.js';

const logger = createLogger('kvstore-test', 'warn');

describe('kvstore factory and options', () => {
  it('splits --kvstore-opt pairs, keeping "=" inside values', () => {
    assert.deepEqual(parseKvstoreOpts(['etcd.endpoints=http://a:2379,http://b:2379', 'etcd.password=a=b']), {
      'etcd.endpoints': 'http://a:2379,http://b:2379',
      'etcd.password': 'a=b',
    });
    assert.throws(() => parseKvstoreOpts(['novalue']), (e: { code?: string }) => e.code === KvstoreErrorCode.INVALID_OPTION);
    assert.throws(() => parseKvstoreOpts(['=x']), (e: { code?: string }) => e.code === KvstoreErrorCode.INVALID_OPTION);
    assert.throws(() => parseKvstoreOpts(['a=1', 'a=2']), /given twice/);
  });

  it('names the unknown backend and unknown options', async () => {
    await rejectsWithCode(openBackend({ kind: 'consul', options: {}, dataDir: '/tmp', logger }), KvstoreErrorCode.UNKNOWN_BACKEND);
    await rejectsWithCode(openBackend({ kind: 'embedded', options: { 'embedded.sync': 'full' }, dataDir: '/tmp', logger }), KvstoreErrorCode.INVALID_OPTION);
    await rejectsWithCode(
      openBackend({ kind: 'embedded', options: { 'embedded.synchronous': 'off' }, dataDir: '/tmp', logger }),
      KvstoreErrorCode.INVALID_OPTION,
    );
    await rejectsWithCode(openBackend({ kind: 'embedded', options: { 'embedded.path': 'rel.db' }, dataDir: '/tmp', logger }), KvstoreErrorCode.INVALID_OPTION);
  });

  it('opens the embedded store under the state dir by default', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tendril-factory-'));
    try {
      const kv = await openBackend({ kind: 'embedded', options: {}, dataDir: dir, logger });
      const st = await kv.status();
      assert.equal(st.detail, join(dir, 'kvstore', 'tendril.db'));
      await kv.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reads a Cilium-style etcd.config file, inline options overriding it', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tendril-factory-'));
    try {
      const ca = join(dir, 'ca.pem');
      writeFileSync(ca, 'not really a cert');
      const cfg = join(dir, 'etcd.yaml');
      writeFileSync(cfg, `endpoints:\n- https://etcd-0:2379\n- https://etcd-1:2379\ntrusted-ca-file: ${ca}\nusername: agent\npassword: pw\n`);
      const fromFile = parseEtcdOptions({ 'etcd.config': cfg }, logger);
      assert.deepEqual(fromFile.endpoints, ['https://etcd-0:2379', 'https://etcd-1:2379']);
      assert.equal(fromFile.tls?.ca.toString(), 'not really a cert');
      assert.deepEqual(fromFile.auth, { username: 'agent', password: 'pw' });
      const overridden = parseEtcdOptions({ 'etcd.config': cfg, 'etcd.endpoints': 'http://127.0.0.1:2379' }, logger);
      assert.deepEqual(overridden.endpoints, ['http://127.0.0.1:2379']);

      writeFileSync(cfg, 'endpoints: [https://etcd-0:2379]\ncert-file-typo: /x\n');
      assert.throws(() => parseEtcdOptions({ 'etcd.config': cfg }, logger), /cert-file-typo|Unrecognized/);
      assert.throws(() => parseEtcdOptions({ 'etcd.config': join(dir, 'missing.yaml') }, logger), /cannot read/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
