import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * ifindex → interface name of this network namespace, from /sys/class/net.
 * Read once and again only when an unknown index shows up (a pod created
 * since), at most once a second: a monitor under a flood of events never
 * rescans per event.
 */
export class InterfaceNames {
  #byIndex = new Map<number, string>();
  #scannedAt = -Infinity;

  constructor(
    private readonly sysClassNet = '/sys/class/net',
    private readonly minRescanMs = 1000,
  ) {}

  name(ifindex: number): string | undefined {
    const known = this.#byIndex.get(ifindex);
    if (known !== undefined) return known;
    if (performance.now() - this.#scannedAt < this.minRescanMs) return undefined;
    this.#scan();
    return this.#byIndex.get(ifindex);
  }

  #scan(): void {
    this.#scannedAt = performance.now();
    const next = new Map<number, string>();
    let names: string[] = [];
    try {
      names = readdirSync(this.sysClassNet);
    } catch {
      // No sysfs (a container without it): names stay unknown, indexes are still shown.
    }
    for (const name of names) {
      try {
        const index = Number(readFileSync(join(this.sysClassNet, name, 'ifindex'), 'utf8').trim());
        if (Number.isInteger(index)) next.set(index, name);
      } catch {
        // The interface went away during the scan.
      }
    }
    this.#byIndex = next;
  }
}
