#!/usr/bin/env node
import { Command, CommanderError } from 'commander';
import { registerAgentCommands, registerIdentityCommands } from './agentCommands.js';
import { CliError } from './cliError.js';
import { registerPolicyCommands } from './policyCommands.js';
import { registerCniCommands } from './cniCommand.js';
import { registerKvstoreCommands } from './kvstoreCommand.js';
import { registerBpfCommands } from './bpfCommands.js';
import { registerMonitorCommand } from './monitorCommand.js';
import { registerObserveCommand } from './observeCommand.js';
import { registerRelayCommand } from './relayCommand.js';
import { registerServiceCommands } from './serviceCommands.js';
import { registerNodeCommands } from './nodeCommands.js';
import { registerInfoCommands } from './infoCommands.js';
import { tendrilVersion } from '../version.js';

export function buildProgram(): Command {
  const program = new Command('tendril')
    .description('tendril: container networking — CLI for the node agent, the kvstore and CNI')
    .version(tendrilVersion())
    .showHelpAfterError()
    .exitOverride();
  registerAgentCommands(program);
  registerIdentityCommands(program);
  registerPolicyCommands(program);
  registerCniCommands(program);
  registerKvstoreCommands(program);
  registerMonitorCommand(program);
  registerObserveCommand(program);
  registerRelayCommand(program);
  registerBpfCommands(program);
  registerServiceCommands(program);
  registerNodeCommands(program);
  registerInfoCommands(program);
  return program;
}

async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode;
    if (err instanceof CliError) {
      process.stderr.write(`tendril: ${err.message}\n`);
      return err.exitCode;
    }
    throw err;
  }
}

const code = await main(process.argv);
// A command may already have set a failing exit code while reporting its own error.
if (!process.exitCode) process.exitCode = code;
