import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { K8sConfigError } from './errors.js';
import { k8sEnabled } from './inCluster.js';
import { loadKubeConfig } from './kubeConfig.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tdl-kubeconfig-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function kubeconfig(name: string, server: string, extra: Record<string, unknown> = {}): Promise<string> {
  const file = join(dir, name);
  const config = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'c', cluster: { server, ...extra } }],
    users: [{ name: 'u', user: { token: 't' } }],
    contexts: [{ name: 'ctx', context: { cluster: 'c', user: 'u' } }],
    'current-context': 'ctx',
  };
  await writeFile(file, JSON.stringify(config));
  return file;
}

describe('loadKubeConfig', () => {
  it('reads a kubeconfig file', async () => {
    const kc = loadKubeConfig({ kubeconfig: await kubeconfig('https', 'https://10.0.0.1:6443', { 'certificate-authority-data': 'AAAA' }) });
    assert.equal(kc.getCurrentCluster()?.server, 'https://10.0.0.1:6443');
    assert.equal(kc.getCurrentCluster()?.skipTLSVerify, false);
    assert.equal(kc.getCurrentUser()?.token, 't');
  });

  it('lets an http server through (the client refuses http without skipTLSVerify)', async () => {
    const kc = loadKubeConfig({ kubeconfig: await kubeconfig('http', 'http://127.0.0.1:8080') });
    assert.equal(kc.getCurrentCluster()?.skipTLSVerify, true);
  });

  it('--k8s-api-server overrides the server and keeps the credentials', async () => {
    const kc = loadKubeConfig({ kubeconfig: await kubeconfig('override', 'https://10.0.0.1:6443'), apiServer: 'http://127.0.0.1:9999' });
    assert.equal(kc.getCurrentCluster()?.server, 'http://127.0.0.1:9999');
    assert.equal(kc.getCurrentCluster()?.skipTLSVerify, true);
    assert.equal(kc.getCurrentUser()?.token, 't');
  });

  it('--k8s-api-server alone is enough', () => {
    const kc = loadKubeConfig({ apiServer: 'https://api.example:6443' }, { env: {}, serviceAccountDir: join(dir, 'none') });
    assert.equal(kc.getCurrentCluster()?.server, 'https://api.example:6443');
  });

  it('uses the service account in a pod', async () => {
    const sa = join(dir, 'sa');
    await import('node:fs/promises').then((fs) => fs.mkdir(sa));
    await writeFile(join(sa, 'token'), 'tok');
    const kc = loadKubeConfig({}, { env: { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' }, serviceAccountDir: sa });
    assert.equal(kc.getCurrentCluster()?.server, 'https://[fd00::1]');
    assert.equal(kc.getCurrentCluster()?.caFile, join(sa, 'ca.crt'));
    assert.equal(k8sEnabled({}, { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' }, sa), true);
  });

  it('refuses with one line naming what is missing', async () => {
    assert.equal(k8sEnabled({}, {}, join(dir, 'none')), false);
    assert.throws(
      () => loadKubeConfig({}, { env: {}, serviceAccountDir: join(dir, 'none') }),
      (err: unknown) => err instanceof K8sConfigError && err.code === 'K8S_CONFIG' && /--k8s-kubeconfig/.test(err.message) && !err.message.includes('\n'),
    );
    assert.throws(() => loadKubeConfig({ kubeconfig: join(dir, 'missing') }), (err: unknown) => err instanceof K8sConfigError && /cannot load kubeconfig .*missing/.test(err.message));
    const noContext = join(dir, 'nocontext');
    await writeFile(noContext, JSON.stringify({ apiVersion: 'v1', kind: 'Config', clusters: [], users: [], contexts: [] }));
    assert.throws(() => loadKubeConfig({ kubeconfig: noContext }), (err: unknown) => err instanceof K8sConfigError && /no current-context/.test(err.message));
    assert.throws(
      () => loadKubeConfig({ apiServer: 'ftp://x' }, { env: {}, serviceAccountDir: join(dir, 'none') }),
      (err: unknown) => err instanceof K8sConfigError && /http:\/\/ or https:\/\//.test(err.message),
    );
  });
});
