// What an operator asks a running agent first: which version runs (agent and
// CLI), with which configuration, what its log says (records that a log
// pipeline can take: no key twice), and why it did not start (one line).
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parse as parseYaml } from 'yaml';
import { runCli } from '../../src/cli/testing/cliProcess.js';
import { AGENT_BIN, type AgentProcess, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { run } from '../support/run.js';

requireRoot('the agent operations test');

const pool = new NetnsPool('op');
const NODE_NAME = 'tdl-node-op';
let agent: AgentProcess;
let cleanup = async () => {};
let version = '';
let scratch = '';

/**
 * The keys an object in raw JSON text holds twice, at any depth. JSON.parse
 * keeps the last of duplicate keys silently, so the text itself is read.
 */
function duplicateKeys(json: string): string[] {
  const dups: string[] = [];
  const stack: Array<Set<string> | 'array'> = [];
  for (let i = 0; i < json.length; i++) {
    const ch = json[i];
    if (ch === '{') stack.push(new Set());
    else if (ch === '[') stack.push('array');
    else if (ch === '}' || ch === ']') stack.pop();
    else if (ch === '"') {
      let end = i + 1;
      while (json[end] !== '"') end += json[end] === '\\' ? 2 : 1;
      const text = json.slice(i, end + 1);
      let next = end + 1;
      while (json[next] === ' ') next++;
      const top = stack.at(-1);
      if (json[next] === ':' && top instanceof Set) {
        const key = JSON.parse(text) as string;
        if (top.has(key)) dups.push(key);
        top.add(key);
      }
      i = end;
    }
  }
  return dups;
}

const logRecords = (output: string) => output.split('\n').filter((l) => l.startsWith('{'));

before(async () => {
  version = (JSON.parse(await readFile(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
  scratch = await mkdtemp(join(tmpdir(), 'tdl-ops-'));
  ({ agent, cleanup } = await startSingleNode(pool, { nodeName: NODE_NAME, args: ['--pod-cidr', '10.246.0.0/24', '--log-level', 'debug'] }));
});

after(async () => {
  await cleanup();
  await pool.cleanup();
  await rm(scratch, { recursive: true, force: true });
});

describe('versions', () => {
  test('tendril-agent --version prints package.json\'s version and exits 0', async () => {
    const r = await run([AGENT_BIN, '--version']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `${version}\n`);
  });

  test('tendril version shows the client\'s and the running agent\'s', async () => {
    const r = await runCli(['version', '--socket', agent.socket]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`^Client\\s+${version}\\nAgent\\s+${version}\\n$`));
    const json = await runCli(['version', '--socket', agent.socket, '-o', 'json']);
    assert.deepEqual(JSON.parse(json.stdout), { client: version, agent: version });
    assert.equal((await agent.client.status()).version, version);
  });

  test('without an agent: the client\'s version, the reason, exit code 1; --client asks no agent', async () => {
    const missing = join(scratch, 'none.sock');
    const r = await runCli(['version', '--socket', missing]);
    assert.equal(r.code, 1);
    assert.match(r.stdout, new RegExp(`^Client\\s+${version}\\nAgent\\s+unreachable: cannot reach the tendril agent at ${missing}`));
    const client = await runCli(['version', '--client', '--socket', missing]);
    assert.equal(client.code, 0, client.stderr);
    assert.match(client.stdout, new RegExp(`^Client\\s+${version}\\n$`));
  });
});

describe('tendril config', () => {
  test('shows the running configuration as a table, JSON and YAML', async () => {
    const tableOut = await runCli(['config', '--socket', agent.socket]);
    assert.equal(tableOut.code, 0, tableOut.stderr);
    assert.match(tableOut.stdout, /^KEY\s+VALUE\n/);
    assert.match(tableOut.stdout, new RegExp(`\\nnodeName\\s+${NODE_NAME}\\n`));
    assert.match(tableOut.stdout, /\npodCidr\s+10\.246\.0\.0\/24\n/);
    assert.match(tableOut.stdout, /\nlogLevel\s+debug\n/);
    const expected = await agent.client.getConfig();
    const json = await runCli(['config', '--socket', agent.socket, '-o', 'json']);
    assert.deepEqual(JSON.parse(json.stdout), expected);
    const yaml = await runCli(['config', '--socket', agent.socket, '-o', 'yaml']);
    assert.deepEqual(parseYaml(yaml.stdout), expected);
  });
});

describe('the agent\'s log', () => {
  test('no record holds a key twice (start-up at debug level, and a stop)', async () => {
    await agent.stop();
    const records = logRecords(agent.output);
    assert.ok(records.length > 5, agent.output);
    const ready = records.map((r) => JSON.parse(r) as Record<string, unknown>).find((r) => r.msg === 'agent ready');
    assert.ok(ready, 'an "agent ready" record');
    assert.equal(ready.nodeName, NODE_NAME, 'every record names the agent\'s node');
    assert.deepEqual(
      records.map((r) => ({ record: r, duplicates: duplicateKeys(r) })).filter((r) => r.duplicates.length > 0),
      [],
    );
  });

  test('the duplicate-key check reads the raw text', () => {
    assert.deepEqual(duplicateKeys('{"node":"a","x":{"node":"b","y":[{"k":1,"k":2}]},"node":"c"}'), ['k', 'node']);
    assert.deepEqual(duplicateKeys('{"a":"\\"b\\":","b":["a","a"]}'), []);
  });
});

describe('a failed start says why in one line', () => {
  const failedStart = async (args: string[], netns?: string): Promise<{ code: number; lines: string[] }> => {
    const argv = netns ? ['nsenter', `--net=/var/run/netns/${netns}`, '--', AGENT_BIN, ...args] : [AGENT_BIN, ...args];
    const r = await run(argv);
    const lines = `${r.stdout}${r.stderr}`.split('\n').filter((l) => l !== '');
    return { code: r.code, lines };
  };
  const oneLine = (lines: string[], message: RegExp) => {
    assert.equal(lines.length, 1, lines.join('\n'));
    assert.match(lines[0]!, /^tendril-agent: /);
    assert.match(lines[0]!, message);
    assert.doesNotMatch(lines[0]!, /^\s*at |\{"level"/);
  };

  test('a flag value its parser refuses', async () => {
    const r = await failedStart(['--mtu', 'abc', '--pod-cidr', '10.0.0.0/24']);
    assert.equal(r.code, 2);
    oneLine(r.lines, /--mtu must be a whole number, got "abc"/);
  });

  test('options that conflict', async () => {
    const r = await failedStart(['--routing-mode', 'tunnel', '--datapath', 'routing', '--pod-cidr', '10.0.0.0/24']);
    assert.equal(r.code, 2);
    oneLine(r.lines, /--routing-mode tunnel needs --datapath bpf/);
  });

  test('an IPv6 pod CIDR through the eBPF overlay, which does not carry IPv6 yet', async () => {
    // In a namespace and directories of its own: an agent that did not refuse would start there, not on this machine.
    const ns = (await pool.add('v6')).name;
    const r = await failedStart(['--pod-cidr', '10.0.0.0/24,fd00:10::/64', '--routing-mode', 'tunnel', '--state-dir', join(scratch, 'v6-state'), '--lib-dir', join(scratch, 'v6-lib'), '--bpffs-root', '/sys/fs/bpf/tdl-v6refusal'], ns);
    assert.equal(r.code, 2);
    oneLine(r.lines, /--pod-cidr fd00:10::\/64: the eBPF overlay \(--routing-mode tunnel\) does not carry IPv6 yet: use --routing-mode native/);
  });

  test('an unknown config file key', async () => {
    const file = join(scratch, 'agent.yaml');
    await writeFile(file, 'podCidrz: [10.0.0.0/24]\n');
    const r = await failedStart(['--config', file]);
    assert.equal(r.code, 2);
    oneLine(r.lines, /unknown key "podCidrz" \(did you mean "podCidr"\?\)/);
  });

  test('a failure while starting: the line on the terminal, the stack only in the log file', async () => {
    const ns = (await pool.add('fail')).name;
    const notADir = join(scratch, 'file');
    await writeFile(notADir, '');
    const args = ['--state-dir', join(notADir, 'state'), '--lib-dir', join(scratch, 'lib'), '--pod-cidr', '10.0.0.0/24', '--datapath', 'routing'];
    const r = await failedStart(args, ns);
    assert.equal(r.code, 1);
    oneLine(r.lines, /failed to start: ENOTDIR/);
    const logFile = join(scratch, 'agent.log');
    const withLog = await failedStart([...args, '--log-file', logFile], ns);
    assert.equal(withLog.code, 1);
    oneLine(withLog.lines, /failed to start: ENOTDIR/);
    const fatal = logRecords(await readFile(logFile, 'utf8')).map((l) => JSON.parse(l) as { msg: string; err?: { stack?: string } });
    assert.ok(fatal.some((l) => l.msg === 'agent failed to start' && l.err?.stack), 'the log file has the stack');
  });
});
