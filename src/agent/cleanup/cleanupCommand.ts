/**
 * `tendril-agent cleanup`: takes everything the agent installed off this node
 * (the network namespace it runs in), after printing what that is. Refuses
 * while an agent runs here: it would put half of it back, and its pods would
 * lose their network under it.
 */
import { realpathSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { createInterface } from 'node:readline/promises';
import { CommanderError } from 'commander';
import { Netlink } from '../../datapath/kernel/netlink/index.js';
import { AgentRunningError, CleanupError } from './cleanupError.js';
import { findLiveAgents } from './liveAgents.js';
import { CLEANUP_COMMAND, type CleanupFlags, cleanupCommand } from './cleanupFlags.js';
import { formatSurvey, removeSurveyed } from './nodeCleanup.js';
import { type CleanupPaths, surveyIsEmpty, surveyNode } from './nodeSurvey.js';

/** Directories cleanup removes whole: absolute, and never a system directory by a slip of a flag. */
function checkedPaths(flags: CleanupFlags): CleanupPaths {
  const out = { stateDir: flags.stateDir, libDir: flags.libDir, bpffsRoot: flags.bpffsRoot };
  for (const [flag, dir] of [['--state-dir', out.stateDir], ['--lib-dir', out.libDir], ['--bpffs-root', out.bpffsRoot]] as const) {
    if (!isAbsolute(dir)) throw new CleanupError('UNSAFE_PATH', `${flag} must be an absolute path, got "${dir}"`);
  }
  for (const [flag, dir] of [['--state-dir', out.stateDir], ['--lib-dir', out.libDir]] as const) {
    // Through symlinks: /var/run is /run.
    const real = realDir(dir);
    if (real.split('/').filter((p) => p !== '').length < 2 || SYSTEM_DIRS.has(real)) {
      throw new CleanupError('UNSAFE_PATH', `${flag} ${dir} is a system directory, not one to remove whole; name the agent's own directory`);
    }
  }
  return { stateDir: resolve(out.stateDir), libDir: resolve(out.libDir), bpffsRoot: resolve(out.bpffsRoot) };
}

/** Directories two levels down that hold more than one program's data. */
const SYSTEM_DIRS = new Set(['/var/lib', '/var/tmp', '/var/log', '/var/cache', '/var/spool', '/var/opt', '/usr/local', '/usr/lib', '/usr/share', '/usr/bin', '/usr/sbin', '/etc/default', '/etc/systemd', '/opt/cni']);

function realDir(dir: string): string {
  try {
    return realpathSync(dir);
  } catch {
    return resolve(dir);
  }
}

/**
 * Throws AgentRunningError when an agent uses the state dir, the lib dir or
 * the sockets named (see liveAgents.ts for how it is found).
 */
export async function refuseWhileAgentRuns(paths: CleanupPaths, sockets: readonly string[]): Promise<void> {
  const agents = await findLiveAgents({ stateDir: paths.stateDir, libDir: paths.libDir, sockets });
  if (agents.length > 0) throw new AgentRunningError(agents);
}

async function confirmed(): Promise<boolean> {
  const rl = createInterface({ input: process.stdin, output: process.stdout });
  try {
    return /^y(es)?$/i.test((await rl.question('Remove all of the above? [y/N] ')).trim());
  } finally {
    rl.close();
  }
}

/** Runs the command; returns the exit code. */
export async function runCleanup(argv: string[], out: (line: string) => void = (l) => process.stdout.write(`${l}\n`)): Promise<number> {
  // Named in full: run on its own, its usage line would say just "cleanup".
  const cmd = cleanupCommand().name(`tendril-agent ${CLEANUP_COMMAND}`);
  let flags: CleanupFlags;
  try {
    cmd.parse(argv, { from: 'user' });
    flags = cmd.opts<CleanupFlags>();
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode;
    throw err;
  }
  try {
    const paths = checkedPaths(flags);
    if (process.getuid?.() !== 0) {
      process.stderr.write('tendril-agent cleanup: must run as root (it changes the host\'s network)\n');
      return 2;
    }
    const sockets = flags.socket !== undefined ? [resolve(flags.socket)] : [];
    try {
      await refuseWhileAgentRuns(paths, sockets);
    } catch (err) {
      // A dry run says what the real one would do: refuse, and why; it never lists a live agent's data.
      if (flags.dryRun === true && err instanceof AgentRunningError) out('would refuse: nothing would be removed');
      throw err;
    }
    const nl = await Netlink.open();
    try {
      const survey = await surveyNode(nl, paths);
      if (surveyIsEmpty(survey)) {
        out('nothing of tendril\'s on this node');
        for (const l of formatSurvey(survey)) out(l);
        return 0;
      }
      out(flags.dryRun ? 'would remove:' : 'removing:');
      for (const l of formatSurvey(survey)) out(`  ${l}`);
      if (flags.dryRun) return 0;
      if (!flags.force) {
        if (!process.stdin.isTTY) throw new CleanupError('NOT_CONFIRMED', 'not removing anything without a terminal to confirm on: add --force (nothing was changed)');
        if (!(await confirmed())) throw new CleanupError('NOT_CONFIRMED', 'not confirmed (nothing was changed)');
      }
      // Checked again right before: an agent may have started while the listing was read.
      await refuseWhileAgentRuns(paths, sockets);
      await removeSurveyed(nl, survey);
      out('done');
      return 0;
    } finally {
      await nl.close();
    }
  } catch (err) {
    process.stderr.write(`tendril-agent cleanup: ${(err as Error).message}\n`);
    return err instanceof CleanupError && err.code !== 'AGENT_RUNNING' ? 2 : 1;
  }
}
