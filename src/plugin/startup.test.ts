import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

const PLUGIN = fileURLToPath(new URL('./main.js', import.meta.url));
const HOOK = fileURLToPath(new URL('../../../test/fixtures/recordPackageLoads.mjs', import.meta.url));

// tendril-cni is exec'd once per CNI call: its start-up is pod start-up. Loading
// the schema library alone more than doubled it, so the plugin's import graph
// must stay free of npm packages. This guards that without timing anything.
test('tendril-cni loads no npm package on its way to an answer', () => {
  for (const command of ['VERSION', 'ADD', 'STATUS']) {
    const r = spawnSync(process.execPath, ['--import', HOOK, PLUGIN], {
      env: { CNI_COMMAND: command, CNI_CONTAINERID: 'c1', CNI_NETNS: '/var/run/netns/none', CNI_IFNAME: 'eth0', CNI_PATH: '/opt/cni/bin', TENDRIL_SOCK: '/nonexistent/tendril.sock' },
      input: JSON.stringify({ cniVersion: '1.0.0', name: 'n', type: 'tendril-cni' }),
      encoding: 'utf8',
    });
    assert.doesNotMatch(r.stderr, /PACKAGE-LOADED/, `${command} loaded packages:\n${r.stderr}`);
    assert.ok(r.stdout.length > 0, `${command} printed an answer`);
  }
});
