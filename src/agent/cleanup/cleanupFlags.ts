/**
 * The flags of `tendril-agent cleanup`, apart from what runs it so the
 * agent's command can list it without loading the kernel layer.
 */
import { Command } from 'commander';
import { DEFAULT_LIB_DIR, DEFAULT_STATE_DIR } from '../../api/types.js';

export const CLEANUP_COMMAND = 'cleanup';

export interface CleanupFlags {
  dryRun?: boolean;
  force?: boolean;
  stateDir: string;
  libDir: string;
  bpffsRoot: string;
  socket?: string;
}

export function cleanupCommand(): Command {
  return new Command(CLEANUP_COMMAND)
    .description('remove everything the agent installed on this node (devices, pods\' host interfaces, routes, nftables table, BPF pins, state); lists it first')
    .option('--dry-run', 'list what would be removed, change nothing')
    .option('--force', 'remove without asking (needed when stdin is not a terminal)')
    .option('--state-dir <dir>', 'the agent\'s --state-dir', DEFAULT_STATE_DIR)
    .option('--lib-dir <dir>', 'the agent\'s --lib-dir', DEFAULT_LIB_DIR)
    .option('--bpffs-root <dir>', 'the agent\'s --bpffs-root', '/sys/fs/bpf')
    .option('--socket <path>', 'the agent\'s --socket, when outside its --state-dir (cleanup also reads it from the state dir\'s agent.json): refuses while an agent answers there')
    .exitOverride();
}
