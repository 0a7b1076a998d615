import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * The README's getting-started commands, read from README.md itself so the
 * README cannot drift from the test that runs it. Each ```sh block is
 * preceded by a marker comment saying where it runs:
 *
 *   <!-- test: one-host:host1 second-node:host1,host2 -->
 *   <!-- test: second-node:host1 background -->
 *   <!-- test: kubernetes:syntax -->
 *
 * `path:host,…` runs the block on those hosts of that path (in document
 * order); `background` marks a long-running process (the agent, etcd) that
 * the test starts, waits for and stops; `agent-stopped` a block that runs
 * after the host's agent stopped (Ctrl-C in its terminal); `kubernetes:syntax`
 * is checked, not run (no API server can run here).
 */
export const README = fileURLToPath(new URL('../../../README.md', import.meta.url));

export interface ReadmeBlock {
  /** path name → the hosts it runs on. */
  runs: Map<string, string[]>;
  background: boolean;
  /** Runs once the host's agent has stopped. */
  agentStopped: boolean;
  code: string;
  /** 1-based line of the block's first command in README.md. */
  line: number;
}

const MARKER = /<!-- test: ([^>]*?) -->\n```sh\n([\s\S]*?)\n```/g;

export function readmeText(): string {
  return readFileSync(README, 'utf8');
}

export function readmeBlocks(text = readmeText()): ReadmeBlock[] {
  const out: ReadmeBlock[] = [];
  for (const m of text.matchAll(MARKER)) {
    const runs = new Map<string, string[]>();
    let background = false;
    let agentStopped = false;
    for (const token of m[1]!.trim().split(/\s+/)) {
      if (token === 'background' || token === 'agent-stopped') {
        if (token === 'background') background = true;
        else agentStopped = true;
        continue;
      }
      const [path, hosts] = token.split(':');
      if (!path || !hosts) throw new Error(`README marker token ${JSON.stringify(token)}: want path:host[,host] or background`);
      runs.set(path, hosts.split(','));
    }
    const line = text.slice(0, m.index + m[0].indexOf('```sh')).split('\n').length + 1;
    out.push({ runs, background, agentStopped, code: m[2]!, line });
  }
  return out;
}

/** How many ```sh blocks README.md has in all (every one must carry a marker). */
export function shBlockCount(text = readmeText()): number {
  return [...text.matchAll(/^```sh$/gm)].length;
}

/** The blocks of one path, in document order, each with the host it runs on (a block on two hosts appears twice). */
export function pathSteps(blocks: readonly ReadmeBlock[], path: string): Array<{ host: string; block: ReadmeBlock }> {
  return blocks.flatMap((block) => (block.runs.get(path) ?? []).map((host) => ({ host, block })));
}

/** What one README host is, in the test: its own dirs and names in place of the machine's. */
export interface HostIsolation {
  /** The agent's state dir (socket, endpoint records): the README's /var/run/tendril. */
  stateDir: string;
  libDir: string;
  bpffsRoot: string;
  netconfDir: string;
  pluginDir: string;
  cacheDir: string;
  etcdDir: string;
  /** README netns name → the test's (tdl-prefixed) name. */
  netns: Record<string, string>;
}

/**
 * The substitutions, all of them: paths of the machine become the host's own
 * dirs, the README's netns names get the test's prefix, the agent and its
 * cleanup are told its dirs (the README relies on the defaults), and
 * `tendril cni add` its result cache (default /var/lib/cni). Nothing else in
 * a command changes.
 */
export function isolate(code: string, h: HostIsolation): string {
  let out = code
    .replaceAll('/var/run/tendril/', `${h.stateDir}/`)
    .replaceAll('/etc/cni/net.d', h.netconfDir)
    .replaceAll('/opt/cni/bin', h.pluginDir)
    .replaceAll('/var/lib/tendril-etcd', h.etcdDir);
  for (const [from, to] of Object.entries(h.netns)) out = out.replace(new RegExp(`(?<![\\w-])${from}(?![\\w-])`, 'g'), to);
  return out
    .split('\n')
    .map((l) => {
      const dirs = `--state-dir ${h.stateDir} --lib-dir ${h.libDir} --bpffs-root ${h.bpffsRoot}`;
      if (/^bin\/tendril-agent --/.test(l)) return l.replace('bin/tendril-agent', `bin/tendril-agent ${dirs}`);
      if (/^bin\/tendril-agent cleanup\b/.test(l)) return l.replace('bin/tendril-agent cleanup', `bin/tendril-agent cleanup ${dirs}`);
      if (/(^|\s)bin\/tendril cni add /.test(l)) return `${l} --cache-dir ${h.cacheDir}`;
      return l;
    })
    .join('\n');
}

/**
 * A command annotated `# fails…` in the README must fail: it becomes a test
 * that the command exits non-zero (under `set -e` a plain failing line would
 * end the script, and `! cmd` is exempt from `set -e`).
 */
export function expectFailures(code: string, line: number): string {
  return code
    .split('\n')
    .map((l, i) => {
      const m = /^(.*\S)\s+# fails\b.*$/.exec(l);
      if (m === null) return l;
      return `if ${m[1]}; then echo "README.md line ${line + i}: expected to fail, but it succeeded: ${m[1]!.replace(/["$`\\]/g, '\\$&')}" >&2; exit 1; fi`;
    })
    .join('\n');
}
