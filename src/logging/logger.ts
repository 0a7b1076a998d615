import { pino, type Logger } from 'pino';

export type { Logger };

/**
 * One structured logger per process. Logs go to stderr so that a plugin's
 * stdout stays reserved for its CNI result and a CLI's stdout for its output.
 */
export function createLogger(name: string, level: string = process.env.TENDRIL_LOG_LEVEL ?? 'info'): Logger {
  return pino({ name, level, base: { pid: process.pid } }, pino.destination(2));
}
