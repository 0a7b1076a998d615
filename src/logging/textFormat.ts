/**
 * The human format of the logs, for a terminal: one line per record, the
 * time, the level, the message, then the record's own fields as key=value.
 * pino writes JSON; this stream rewrites each record before it reaches the
 * real destination, so both formats carry the same records.
 */
import type { DestinationStream } from 'pino';

export const LOG_FORMATS = ['auto', 'json', 'text'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

const LEVELS: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };

/** Fields every record has (pino's own and the logger's base): said once by the line's layout, or left out. */
const LAYOUT_KEYS = new Set(['level', 'time', 'msg', 'pid', 'hostname', 'name', 'nodeName']);

/** A value as one token: bare when it is one word, else JSON (quoted, escaped: no line breaks). */
function token(v: unknown): string {
  if (typeof v === 'string') return /^[^\s"=]+$/.test(v) ? v : JSON.stringify(v);
  if (typeof v === 'number' || typeof v === 'boolean' || v === null) return String(v);
  return JSON.stringify(v);
}

/** One JSON record as a line: `2026-11-28T23:40:00.123Z INFO  [policy] policy added policy=… revision=3`. */
export function formatRecord(json: string): string {
  let r: Record<string, unknown>;
  try {
    r = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json.endsWith('\n') ? json : `${json}\n`;
  }
  const time = typeof r.time === 'string' ? r.time : typeof r.time === 'number' ? new Date(r.time).toISOString() : '';
  const level = (LEVELS[Number(r.level)] ?? String(r.level)).padEnd(5);
  const subsys = typeof r.subsys === 'string' ? `[${r.subsys}] ` : '';
  const fields: string[] = [];
  let stack = '';
  for (const [k, v] of Object.entries(r)) {
    if (LAYOUT_KEYS.has(k) || k === 'subsys') continue;
    if (k === 'err' && v !== null && typeof v === 'object') {
      const e = v as { message?: unknown; code?: unknown; stack?: unknown };
      fields.push(`err=${token(e.message ?? '')}`, ...(e.code !== undefined ? [`code=${token(e.code)}`] : []));
      // The stack is for debugging: below the line, indented, only at debug level and finer.
      if (typeof e.stack === 'string' && Number(r.level) <= 20) stack = `\n    ${e.stack.split('\n').join('\n    ')}`;
      continue;
    }
    fields.push(`${k}=${token(v)}`);
  }
  return `${time} ${level} ${subsys}${String(r.msg ?? '')}${fields.length > 0 ? ` ${fields.join(' ')}` : ''}${stack}\n`;
}

/** A destination that writes each record as formatRecord's line to `to`. */
export function textDestination(to: DestinationStream & { flushSync?: () => void; flush?: (cb?: (err?: Error) => void) => void }): DestinationStream & { flushSync(): void; flush(cb?: (err?: Error) => void): void } {
  return {
    write: (chunk: string) => {
      // pino hands over one record per write, newline-terminated.
      for (const line of chunk.split('\n')) if (line !== '') to.write(formatRecord(line));
    },
    flushSync: () => to.flushSync?.(),
    flush: (cb) => (to.flush ? to.flush(cb) : cb?.()),
  };
}

/** `auto`: text when the logs go to a terminal, JSON otherwise (a file, a pipe, a log collector). */
export function resolveLogFormat(format: LogFormat, toTerminal: boolean): 'json' | 'text' {
  return format === 'auto' ? (toTerminal ? 'text' : 'json') : format;
}
