import { InvalidOptionError } from './errors.js';

/** Parses an option duration such as "500ms", "5s" or "2m" (Cilium-style) into milliseconds. */
export function parseDurationMs(name: string, text: string): number {
  const m = /^([0-9]+)(ms|s|m)$/.exec(text.trim());
  if (m === null) throw new InvalidOptionError(`${name}: "${text}" is not a duration like 500ms, 5s or 2m`);
  const n = Number(m[1]);
  const ms = m[2] === 'ms' ? n : m[2] === 's' ? n * 1000 : n * 60_000;
  if (ms <= 0) throw new InvalidOptionError(`${name}: duration must be positive`);
  return ms;
}
