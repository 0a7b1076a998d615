import { type DestinationStream, type LoggerOptions, pino, type Logger } from 'pino';
import { type LogFormat, LOG_FORMATS, resolveLogFormat, textDestination } from './textFormat.js';

export type { Logger };
export { LOG_FORMATS, type LogFormat };

/** Records carry ISO 8601 times (`"time":"2026-11-28T23:40:00.123Z"`), not epoch milliseconds: readable as they are, and parsed alike by log pipelines. */
export const ISO_TIME: LoggerOptions['timestamp'] = pino.stdTimeFunctions.isoTime;

/**
 * Where records go in the format asked: `dest` itself for JSON, or through
 * the text formatter; `auto` is text when `toTerminal`.
 */
export function formattedDestination(dest: DestinationStream, format: LogFormat, toTerminal: boolean): DestinationStream {
  return resolveLogFormat(format, toTerminal) === 'text' ? textDestination(dest) : dest;
}

/** $TENDRIL_LOG_FORMAT when it names a format, else auto. */
function envLogFormat(): LogFormat {
  const f = process.env.TENDRIL_LOG_FORMAT;
  return (LOG_FORMATS as readonly string[]).includes(f ?? '') ? (f as LogFormat) : 'auto';
}

/**
 * One structured logger per process. Logs go to stderr so that a plugin's
 * stdout stays reserved for its CNI result and a CLI's stdout for its output;
 * a human line on a terminal, JSON otherwise ($TENDRIL_LOG_FORMAT overrides).
 */
export function createLogger(name: string, level: string = process.env.TENDRIL_LOG_LEVEL ?? 'info'): Logger {
  return pino({ name, level, base: { pid: process.pid }, timestamp: ISO_TIME }, formattedDestination(pino.destination(2), envLogFormat(), process.stderr.isTTY === true));
}
