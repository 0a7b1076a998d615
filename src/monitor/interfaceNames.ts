import { Netlink } from '../datapath/kernel/netlink/index.js';

/** Lists the links of the agent's network namespace: (index, name) pairs. */
export type LinkLister = () => Promise<ReadonlyArray<{ index: number; name: string }>>;

/**
 * The links of the calling process's namespace, over netlink. Not
 * /sys/class/net: sysfs shows the namespace of whoever mounted it, and an
 * agent entered into a node namespace with `nsenter --net` would read the
 * root namespace's interfaces there.
 */
export const netlinkLinks: LinkLister = async () => {
  const nl = await Netlink.open();
  try {
    return await nl.listLinks();
  } finally {
    await nl.close();
  }
};

/**
 * ifindex → interface name, kept from one listing to the next. `name` is
 * synchronous (events are resolved one by one as they are read); an index
 * it does not know yet (a pod created since) starts a new listing, at most
 * one a second, so a monitor under a flood of events never lists per event,
 * and that event shows the index alone.
 */
export class InterfaceNames {
  #byIndex = new Map<number, string>();
  #listedAt = -Infinity;
  #listing: Promise<void> | undefined;

  constructor(
    private readonly list: LinkLister = netlinkLinks,
    /** Told when a listing fails; names are a convenience, so events then show the index alone. */
    private readonly onError: (err: unknown) => void = () => undefined,
    private readonly minRelistMs = 1000,
  ) {}

  /** Lists the links now (the agent calls it once at start, so the first events have names). */
  refresh(): Promise<void> {
    this.#listing ??= this.#list().finally(() => {
      this.#listing = undefined;
    });
    return this.#listing;
  }

  name(ifindex: number): string | undefined {
    const known = this.#byIndex.get(ifindex);
    if (known !== undefined) return known;
    if (performance.now() - this.#listedAt >= this.minRelistMs) void this.refresh();
    return undefined;
  }

  async #list(): Promise<void> {
    this.#listedAt = performance.now();
    try {
      const next = new Map<number, string>();
      for (const l of await this.list()) next.set(l.index, l.name);
      this.#byIndex = next;
    } catch (err) {
      this.onError(err);
    }
  }
}
