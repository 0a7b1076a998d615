import type { MonitorEvent, MonitorFilter } from './types.js';

/** Whether an event passes a monitor client's filter. */
export function matchesFilter(e: MonitorEvent, f: MonitorFilter): boolean {
  if (f.types && f.types.length > 0 && !f.types.includes(e.type)) return false;
  if (f.endpoint !== undefined && e.source.endpoint !== f.endpoint && e.destination.endpoint !== f.endpoint) return false;
  if (f.identity !== undefined && e.source.identity !== f.identity && e.destination.identity !== f.identity) return false;
  return true;
}
