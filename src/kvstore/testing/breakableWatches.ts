import { CompactedError } from '../errors.js';
import type { Backend, WatchListener } from '../types.js';

/** A backend whose watches can be made deaf and then failed with a compaction, on demand. */
export function breakableWatches(backend: Backend): { backend: Backend; deafen(): void; compact(): void } {
  const listeners: WatchListener[] = [];
  let deaf = false;
  const proxy = new Proxy(backend, {
    get(target, prop, receiver) {
      if (prop === 'watch') {
        return (prefix: string, options: object, listener: WatchListener) => {
          const wrapped: WatchListener = {
            onEvents: (evs) => {
              if (!deaf) listener.onEvents(evs);
            },
            onError: (err) => listener.onError(err),
          };
          listeners.push(wrapped);
          return target.watch(prefix, options, wrapped);
        };
      }
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return {
    backend: proxy,
    deafen: () => {
      deaf = true;
    },
    compact: () => {
      deaf = false;
      for (const l of listeners.splice(0)) l.onError(new CompactedError(1, 2));
    },
  };
}
