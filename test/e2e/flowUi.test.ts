// The flow UI in a real browser (Debian's Chromium, headless), served by the
// relay (the real Relay, in the test's process) over a real agent's flows
// listener (its token wanted, the relay's own token sent by the page, given
// in the address's fragment): pods on the eBPF datapath, a policy that allows client →
// server:80 and denies other → server:80, real connections. The map shows
// the workloads and a red edge for the denied flow; the table's filters go
// to the agent and change the rows; the drop's panel names the rule and
// shows the policy's text; "suggest a policy" for server gives a
// NetworkPolicy that, imported in place of the test's, lets the seen
// connection through and refuses what was not seen — on real traffic.
// Screenshots go to build/test-artifacts/ui/.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { deletePolicyAndWait, importPolicyAndWait } from '../support/datapathNode.js';
import { type Scene, startScene } from '../support/datapathScene.js';
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { TENDRIL_BIN } from '../support/tendrilBin.js';
import { cliJson } from '../support/datapathNode.js';
import { NetnsPool } from '../support/netns.js';
import { tendrilPolicy } from '../support/policyDocuments.js';
import type { Peer } from '../support/policyTruthTable.js';
import type { Probe, ProbeOutcome } from '../support/reachability.js';
import { requireRoot } from '../support/root.js';

requireRoot('the flow UI test');

const NS = 'tdl-ui';
const ARTIFACTS = fileURLToPath(new URL('../../../build/test-artifacts/ui/', import.meta.url));
const GUARD = tendrilPolicy(
  NS,
  'guard',
  'endpointSelector: {matchLabels: {app: server}}\ningress:\n- fromEndpoints: [{matchLabels: {app: client}}]\ningressDeny:\n- fromEndpoints: [{matchLabels: {app: other}}]\n  toPorts: [{ports: [{port: "80", protocol: TCP}]}]',
);
const RED = '#d93025';

const pool = new NetnsPool('fui');
let scene: Scene | undefined;
let ui: { url: string; close(): Promise<void> } | undefined;
const NODE_TOKEN = 'tdl-ui-node-token';
const NODE_FLOWS = '127.0.0.1:4244';
const RELAY_ADDR = '127.0.0.1:4245';
const RELAY_TOKEN = 'tdl-ui-relay-token';
/** The tokens' files, removed after. */
let tokens: string | undefined;
let browser: Browser | undefined;
let page: Page | undefined;

const peer = (app: string): Peer => {
  const p = scene!.peers.get(`${NS}/${app}`);
  if (!p) throw new Error(`no pod ${app}`);
  return p;
};
async function probe(src: string, dst: string, p: Omit<Probe, 'dst'>): Promise<ProbeOutcome> {
  return (await peer(src).prober.probe({ timeoutMs: 2000, ...p, dst: peer(dst).address })).outcome;
}
/** A probe expected to be dropped: a short timeout, the default's. */
const probeDropped = (src: string, dst: string, port: number) => probe(src, dst, { proto: 'tcp', port, timeoutMs: 400 });
/** The page loaded afresh (no filter left from an earlier test), once it shows `apps`. */
async function open(apps: string[]): Promise<void> {
  // The page takes the token from the fragment (never sent to the server) and drops it from the address bar.
  // From a blank page: a fragment alone would be a navigation within the page already open, not a fresh load.
  await page!.goto('about:blank');
  await page!.goto(`${ui!.url}#token=${RELAY_TOKEN}`);
  try {
    for (const app of apps) await page!.locator(`.workload[data-workload="${NS}/${app}"]`).waitFor({ timeout: 15_000 });
  } catch (err) {
    const said = await page!.evaluate('document.body.innerText.slice(0, 800)');
    throw new Error(`${(err as Error).message}\nthe page says: ${String(said)}`);
  }
}
const shot = async (name: string) => {
  await page!.screenshot({ path: join(ARTIFACTS, `${name}.png`) });
};

before(async () => {
  await mkdir(ARTIFACTS, { recursive: true });
  console.log(`flow UI screenshots: ${ARTIFACTS}`);
  tokens = await mkdtemp(join(tmpdir(), 'tdl-ui-tokens-'));
  const tokenFile = join(tokens, 'node-token');
  await writeFile(tokenFile, `${NODE_TOKEN}\n`, { mode: 0o600 });
  scene = await startScene(pool, {
    extraAgentArgs: ['--flows-listen-addr', NODE_FLOWS, '--flows-token-file', tokenFile],
    nodeName: 'tdl-node-ui',
    podCidr: '10.239.0.0/24',
    pods: ['client', 'server', 'other', 'idle'].map((app) => ({ name: app, namespace: NS, labels: { app } })),
    tcpPorts: [80, 8080],
    udpPorts: [],
    outside: [],
  });
  // `tendril relay` beside the agent, in the node's namespace (its loopback is the test's own: fixed ports cannot clash).
  const nodes = await cliJson<Array<{ local?: boolean; flows?: { address: string } }>>(scene.node, ['node', 'list']);
  assert.equal(nodes.find((n) => n.local)?.flows?.address, NODE_FLOWS, 'the node announces its flows address');
  await writeFile(join(tokens, 'relay-token'), `${RELAY_TOKEN}\n`, { mode: 0o600 });
  const relay = spawn(
    'nsenter',
    [`--net=/var/run/netns/${scene.node.node}`, '--', TENDRIL_BIN, 'relay', '--listen-addr', RELAY_ADDR, '--token-file', join(tokens, 'relay-token'), '--peer', `tdl-node-ui=http://${NODE_FLOWS}`, '--peer-token-file', tokenFile],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let said = '';
  relay.stdout.on('data', (c: Buffer) => (said += c.toString()));
  relay.stderr.on('data', (c: Buffer) => (said += c.toString()));
  const exited = new Promise((r) => relay.once('exit', r));
  ui = {
    url: `http://${RELAY_ADDR}/`,
    close: async () => {
      if (relay.exitCode === null) relay.kill('SIGTERM');
      await exited;
    },
  };
  for (let i = 0; i < 200 && !said.includes('serving on') && relay.exitCode === null; i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok(said.includes('serving on'), `the relay serves: ${said}`);
  browser = await launchChromium({ netns: scene.node.node });
  page = await browser.newPage({ viewport: { width: 1366, height: 768 } });
});

after(async () => {
  await browser?.close();
  await ui?.close();
  if (scene) await scene.cleanup();
  else await pool.cleanup();
  if (tokens !== undefined) await rm(tokens, { recursive: true, force: true });
});

describe('the flow UI on a real agent', () => {
  test('traffic: client → server:80 allowed, other → server:80 denied, port 8080 listening', async () => {
    // Every pod listens on 8080: what the suggested policy refuses there later is the policy's doing.
    assert.equal(await probe('client', 'other', { proto: 'tcp', port: 8080 }), 'open');
    await importPolicyAndWait(scene!.node, GUARD);
    for (let i = 0; i < 2; i++) {
      assert.equal(await probe('client', 'server', { proto: 'tcp', port: 80 }), 'open');
      assert.equal(await probeDropped('other', 'server', 80), 'timeout');
    }
  });

  test('the map shows the workloads and a red edge for the denied flow', async () => {
    await open(['client', 'server', 'other']);
    const denied = page!.locator(`path.edge[data-from="${NS}/other"][data-to="${NS}/server"][data-verdict="dropped"]`);
    await denied.waitFor({ timeout: 15_000 });
    assert.equal(await denied.getAttribute('stroke'), RED);
    const allowed = page!.locator(`path.edge[data-from="${NS}/client"][data-to="${NS}/server"][data-verdict="forwarded"]`);
    await allowed.waitFor();
    assert.notEqual(await allowed.getAttribute('stroke'), RED);
    assert.ok(Number(await denied.getAttribute('data-count')) >= 2, 'the two refused connections counted');
    await shot('map');
  });

  test('the table\'s filters go to the agent and change the rows', async () => {
    const flowsIn = async () => Number(await page!.locator('.app').getAttribute('data-flows'));
    const all = await flowsIn();
    await page!.fill('input.filter-text', `from-pod=${NS}/other`);
    await page!.press('input.filter-text', 'Enter');
    await page!.waitForFunction(`document.querySelector('.app').dataset.status === 'following' && Number(document.querySelector('.app').dataset.flows) > 0 && Number(document.querySelector('.app').dataset.flows) < ${all}`, undefined, { timeout: 10_000 });
    const sources = await page!.locator('.flow-row .c-peer:nth-child(2)').allTextContents();
    assert.ok(sources.length > 0 && sources.every((s) => s.startsWith(`${NS}/other:`)), sources.join('\n'));
    await page!.selectOption('select.verdict-select', 'dropped');
    await page!.waitForFunction(`[...document.querySelectorAll('.flow-row')].length > 0 && [...document.querySelectorAll('.flow-row')].every((r) => r.dataset.verdict === 'dropped')`, undefined, { timeout: 10_000 });
    await shot('table-filtered');
    // A filter the agent refuses is said, not hidden.
    await page!.fill('input.filter-text', 'verdict=maybe');
    await page!.press('input.filter-text', 'Enter');
    await page!.locator('.status-error').waitFor({ timeout: 10_000 });
    assert.match((await page!.locator('.status-error').textContent()) ?? '', /--verdict must be one of/);
  });

  test('a drop\'s panel names the rule and shows the policy', async () => {
    await open(['other', 'server']);
    await page!.locator(`path.edge[data-from="${NS}/other"][data-to="${NS}/server"][data-verdict="dropped"]`).dispatchEvent('click');
    const rule = `TendrilNetworkPolicy/${NS}/guard spec.ingressDeny[0]`;
    await page!.locator('.details .rule-text', { hasText: rule }).first().waitFor({ timeout: 5000 });
    const text = page!.locator('.details .policy-text').first();
    await text.waitFor({ timeout: 5000 });
    const yaml = (await text.textContent()) ?? '';
    assert.match(yaml, /ingressDeny:/);
    assert.match(yaml, /app: other/);
    await shot('drop-panel');
    // The same from a row of the table.
    await page!.locator('.flow-row[data-verdict="dropped"]').first().click();
    await page!.locator('.details .rule-text', { hasText: rule }).first().waitFor({ timeout: 5000 });
  });

  test('"suggest a policy" for server allows what was seen, and nothing else, on real traffic', async () => {
    await open(['client', 'server']);
    await page!.locator(`.workload[data-workload="${NS}/server"]`).dispatchEvent('click');
    await page!.locator('.suggest-button').click();
    const area = page!.locator('textarea.suggestion');
    await area.waitFor({ timeout: 5000 });
    const yaml = await area.inputValue();
    await shot('suggest');
    assert.match(yaml, /kind: NetworkPolicy/);
    assert.match(yaml, /app: client/);
    assert.match(yaml, /port: 80\b/);
    assert.doesNotMatch(yaml, /app: other/, 'the refused peer is not allowed');

    await deletePolicyAndWait(scene!.node, ['--namespace', NS, '--name', 'guard']);
    assert.equal(await probe('other', 'server', { proto: 'tcp', port: 80 }), 'open', 'no policy: other reaches server');
    const imported = await importPolicyAndWait(scene!.node, yaml);
    assert.deepEqual(imported.policies, [`NetworkPolicy/${NS}/server-observed`]);
    assert.equal(await probe('client', 'server', { proto: 'tcp', port: 80 }), 'open', 'the seen connection');
    assert.equal(await probeDropped('client', 'server', 8080), 'timeout', 'a port not seen');
    assert.equal(await probeDropped('other', 'server', 80), 'timeout', 'the peer that was refused');
    assert.equal(await probeDropped('idle', 'server', 80), 'timeout', 'a peer never seen');
    assert.equal(await probe('client', 'other', { proto: 'tcp', port: 8080 }), 'open', 'pods the policy does not select are untouched');
    await deletePolicyAndWait(scene!.node, ['--namespace', NS, '--name', 'server-observed']);
  });
});
