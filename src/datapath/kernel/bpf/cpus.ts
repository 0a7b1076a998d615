import { readFileSync } from 'node:fs';

/**
 * Per-CPU map values hold one slot per *possible* CPU (not online, not
 * present): the kernel sizes them by cpu_possible_mask, which it publishes in
 * this file as ranges such as "0-3" or "0,2-5".
 */
export const POSSIBLE_CPUS_FILE = '/sys/devices/system/cpu/possible';

/** Counts the CPUs in a kernel CPU list ("0-3,8,10-11"). */
export function parseCpuList(text: string): number {
  const trimmed = text.trim();
  if (trimmed === '') throw new Error('empty CPU list');
  let count = 0;
  for (const part of trimmed.split(',')) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) throw new Error(`malformed CPU list ${JSON.stringify(trimmed)}`);
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : Number(m[2]);
    if (hi < lo) throw new Error(`malformed CPU range ${part}`);
    count += hi - lo + 1;
  }
  return count;
}

let possible: number | undefined;

/** How many slots a per-CPU map value has on this machine (read once). */
export function possibleCpus(): number {
  possible ??= parseCpuList(readFileSync(POSSIBLE_CPUS_FILE, 'utf8'));
  return possible;
}
