import type { Logger } from '../logging/logger.js';

/** Resolves at the first SIGTERM or SIGINT (logged): when a daemon's main stops what it runs. */
export function untilStopSignal(log: Logger): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      log.info({ signal }, 'stopping');
      resolve(signal);
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
}
