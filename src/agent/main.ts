#!/usr/bin/env node
// tendril-agent: the node agent. Flags override the optional YAML config file.
import { untilStopSignal } from '../async/stopSignal.js';
import { CommanderError } from 'commander';
import { KvstoreError } from '../kvstore/errors.js';
import { NodeConfigError } from '../node/index.js';
import { Agent } from './agent.js';
import { agentLogger } from './agentLogger.js';
import { agentCommand, type Flags, resolveConfig } from './agentCli.js';
import { runCleanup } from './cleanup/cleanupCommand.js';
import { CLEANUP_COMMAND } from './cleanup/cleanupFlags.js';
import { OwnershipError } from '../errors/ownershipError.js';
import { ConfigError } from './config.js';
import { K8sConfigError } from '../k8s/index.js';

export { agentCommand, resolveConfig };

async function main(argv: string[]): Promise<number> {
  // A command of its own: it must never go on to start an agent.
  if (argv[2] === CLEANUP_COMMAND) return runCleanup(argv.slice(3));
  const cmd = agentCommand();
  let flags: Flags;
  try {
    cmd.parse(argv);
    flags = cmd.opts<Flags>();
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode;
    // A flag value its parser refuses (--mtu abc): one line, as commander's own errors.
    if (err instanceof ConfigError) {
      process.stderr.write(`tendril-agent: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  let config;
  try {
    config = await resolveConfig(flags);
  } catch (err) {
    process.stderr.write(`tendril-agent: ${(err as Error).message}\n`);
    return 2;
  }
  if (process.getuid?.() !== 0) {
    process.stderr.write('tendril-agent: must run as root (it changes the host\'s network)\n');
    return 2;
  }
  const log = agentLogger(config);
  let agent: Agent;
  try {
    agent = await Agent.start(config, log);
  } catch (err) {
    if (err instanceof OwnershipError) {
      // Another agent owns this node: one line, and the log file (if any) says it too.
      if (config.logFile) log.fatal({ err }, 'not starting');
      log.flush();
      process.stderr.write(`tendril-agent: ${err.message}\n`);
      return 1;
    }
    if (err instanceof NodeConfigError || err instanceof ConfigError || err instanceof K8sConfigError) {
      // A configuration the node cannot run (an MTU above what the underlay carries, no usable kubeconfig,
      // --ipam kubernetes on a Node without pod CIDRs): said as the config errors are, one line, exit code 2.
      if (config.logFile) log.fatal({ err: { code: err.code, message: err.message } }, 'not starting');
      log.flush();
      process.stderr.write(`tendril-agent: ${err.message}\n`);
      return 2;
    }
    if (err instanceof KvstoreError) {
      // The message is the diagnosis (a damaged store says what to do): one line, no stack; the log file (if any) says it too.
      if (config.logFile) log.fatal({ err: err.toJSON() }, 'agent failed to start');
      log.flush();
      process.stderr.write(`tendril-agent: failed to start: ${err.message}\n`);
      return 1;
    }
    // On the terminal the line below is the whole story; the stack goes to the log file only.
    if (config.logFile) log.fatal({ err }, 'agent failed to start');
    log.flush();
    process.stderr.write(`tendril-agent: failed to start: ${(err as Error).message}\n`);
    return 1;
  }
  await untilStopSignal(log);
  await agent.stop();
  log.flush();
  return 0;
}

process.exitCode = await main(process.argv);
