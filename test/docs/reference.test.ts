// The reference page must name every flag tendril-agent and tendril-operator take: the flags are
// read from the agent's own command definition (what `tendril-agent --help`
// prints, subcommands included), so a new flag without a line in
// docs/reference.md fails here instead of going undocumented.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import { agentCommand } from '../../src/agent/agentCli.js';
import { operatorCommand } from '../../src/operator/config.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const REFERENCE_PAGE = 'docs/reference.md';

/** Every long flag of a command and its subcommands, as `--flag`, with where it comes from. */
function longFlags(cmd: Command, path: string): Array<{ flag: string; where: string }> {
  const own = cmd.options.flatMap((o) => (o.long === undefined ? [] : [{ flag: o.long, where: path }]));
  return [...own, ...cmd.commands.flatMap((c) => longFlags(c, `${path} ${c.name()}`))];
}

/** Whether the text names the flag as a whole word (`--bpf-policy-max` does not name `--bpf-policy-max-x`, nor the reverse). */
function namesFlag(text: string, flag: string): boolean {
  const escaped = flag.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`(^|[^a-z0-9-])${escaped}(?![a-z0-9-])`, 'm').test(text);
}

test('namesFlag matches whole flags only', () => {
  assert.ok(namesFlag('and `--bpf-policy-max` (all', '--bpf-policy-max'));
  assert.ok(!namesFlag('and `--bpf-policy-endpoint-max`', '--bpf-policy-max'));
  assert.ok(!namesFlag('`--bpf-policy-max-entries`', '--bpf-policy-max'));
  assert.ok(namesFlag('`--masquerade`/`--no-masquerade`', '--no-masquerade'));
});

test(`every flag in tendril-agent --help is documented in ${REFERENCE_PAGE}`, () => {
  const page = readFileSync(`${ROOT}${REFERENCE_PAGE}`, 'utf8');
  const flags = longFlags(agentCommand(), 'tendril-agent').filter((f) => f.flag !== '--help');
  assert.ok(flags.length > 50, `read ${flags.length} flags from the agent's command`);
  const missing = flags.filter((f) => !namesFlag(page, f.flag)).map((f) => `${f.where} ${f.flag}`);
  assert.deepEqual(missing, [], `flags of tendril-agent not named in ${REFERENCE_PAGE}`);
});

test(`every flag in tendril-operator --help is documented in ${REFERENCE_PAGE}`, () => {
  const page = readFileSync(`${ROOT}${REFERENCE_PAGE}`, 'utf8');
  const flags = longFlags(operatorCommand(), 'tendril-operator').filter((f) => f.flag !== '--help' && f.flag !== '--version');
  assert.ok(flags.length > 10, `read ${flags.length} flags from the operator's command`);
  const missing = flags.filter((f) => !namesFlag(page, f.flag)).map((f) => `${f.where} ${f.flag}`);
  assert.deepEqual(missing, [], `flags of tendril-operator not named in ${REFERENCE_PAGE}`);
});

test('the README links the reference page', () => {
  const readme = readFileSync(`${ROOT}README.md`, 'utf8');
  assert.ok(readme.includes(`](${REFERENCE_PAGE})`), `README.md links ${REFERENCE_PAGE}`);
});

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes. */
function anchors(markdown: string): Set<string> {
  const text = markdown.replace(/^```[\s\S]*?^```$/gm, '');
  return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map((m) => m[1]!.toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replace(/ /g, '-')));
}

test('every link between README.md, docs/reference.md and deploy/kubernetes/README.md reaches a file and a heading', () => {
  for (const page of ['README.md', REFERENCE_PAGE, 'deploy/kubernetes/README.md']) {
    const text = readFileSync(`${ROOT}${page}`, 'utf8');
    const dir = dirname(page);
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target!)) continue;
      const [file, anchor] = target!.split('#');
      const path = file === '' ? page : join(dir, file!);
      assert.ok(existsSync(`${ROOT}${path}`), `${page}: link ${target} names ${path}, which does not exist`);
      if (anchor !== undefined) assert.ok(anchors(readFileSync(`${ROOT}${path}`, 'utf8')).has(anchor), `${page}: link ${target}: no heading #${anchor} in ${path}`);
    }
  }
});
