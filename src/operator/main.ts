#!/usr/bin/env node
// tendril-operator: identity and endpoint GC and cluster-pool CIDR allocation, one leader at a time.
import { untilStopSignal } from '../async/stopSignal.js';
import { CommanderError } from 'commander';
import { pino } from 'pino';
import { ConfigError } from '../errors/configError.js';
import { K8sConfigError, loadKubeConfig } from '../k8s/kubernetes.js';
import { formattedDestination, ISO_TIME } from '../logging/logger.js';
import { MetricsServeError } from '../metrics/metricsServer.js';
import { operatorCommand, operatorConfig, type OperatorFlags } from './config.js';
import { Operator } from './operator.js';

async function main(argv: string[]): Promise<number> {
  const cmd = operatorCommand();
  let config;
  try {
    cmd.parse(argv);
    config = operatorConfig(cmd.opts<OperatorFlags>());
  } catch (err) {
    // --help and --version end here with 0; a flag commander refuses has printed its own line.
    if (err instanceof CommanderError) return err.exitCode === 0 ? 0 : 2;
    if (err instanceof ConfigError) {
      process.stderr.write(`tendril-operator: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  let kubeConfig;
  try {
    kubeConfig = loadKubeConfig({ kubeconfig: config.kubeconfig, apiServer: config.apiServer });
  } catch (err) {
    if (!(err instanceof K8sConfigError)) throw err;
    process.stderr.write(`tendril-operator: ${err.message}\n`);
    return 2;
  }
  // Structured as the agent's records: ISO times, pid, the program's name; JSON unless on a terminal.
  const log = pino(
    { name: 'tendril-operator', level: config.logLevel, base: { pid: process.pid, id: config.id }, timestamp: ISO_TIME },
    formattedDestination(pino.destination(2), config.logFormat, process.stderr.isTTY === true),
  );
  let operator: Operator;
  try {
    operator = await Operator.start(config, kubeConfig, log);
  } catch (err) {
    log.flush();
    if (err instanceof MetricsServeError) {
      process.stderr.write(`tendril-operator: ${err.message}\n`);
      return 1;
    }
    process.stderr.write(`tendril-operator: failed to start: ${(err as Error).message}\n`);
    return 1;
  }
  await untilStopSignal(log);
  await operator.stop();
  log.info('stopped');
  log.flush();
  return 0;
}

process.exitCode = await main(process.argv);
