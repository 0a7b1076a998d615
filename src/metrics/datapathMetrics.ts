/**
 * The eBPF datapath's metrics, read from its pinned maps at scrape time:
 * packets and bytes forwarded and dropped by reason (the per-CPU metrics map
 * `tendril bpf metrics` decodes), conntrack entries, and each map's pressure
 * (entries over max_entries), which warns before a full map starts failing
 * inserts. Without the eBPF datapath these metrics have no samples.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import { MapName, type MapNameValue, MetricsReason } from '../datapath/bpf/constants.js';
import type { DatapathInspector, MetricsRow } from '../datapath/bpf/inspect.js';
import { isKernelError } from '../datapath/kernel/errors.js';
import { RawMap } from '../datapath/kernel/bpf/index.js';

/** One map's fill. */
export interface MapUsage {
  map: string;
  entries: number;
  maxEntries: number;
}

/** What the collector reads on each scrape. */
export interface DatapathMetricsSource {
  /** Packets and bytes by reason and direction, summed over CPUs. */
  counters(): Promise<MetricsRow[]>;
  /** The fill of the maps whose entries come and go (hash maps and tries). */
  mapUsage(): Promise<MapUsage[]>;
}

/** Maps whose fill changes with traffic or with the cluster: the ones that can run full. */
const PRESSURE_MAPS: readonly MapNameValue[] = [
  MapName.ENDPOINTS,
  MapName.IPCACHE,
  MapName.POLICY,
  MapName.CT_TCP,
  MapName.CT_ANY,
  MapName.FRAG,
  MapName.SNAT,
  MapName.LB_SERVICES,
  MapName.LB_BACKENDS,
  MapName.LB_REVNAT,
  MapName.LB_AFFINITY,
  MapName.LB_MEMBERS,
];

/** The conntrack tables by the name `tendril bpf ct` gives them. */
const CT_TABLES: ReadonlyArray<[string, MapNameValue]> = [
  ['tcp', MapName.CT_TCP],
  ['any', MapName.CT_ANY],
];

/** The pinned maps under the inspector's directory; a map not pinned (an older datapath) is left out. */
export function pinnedDatapathSource(inspector: DatapathInspector): DatapathMetricsSource {
  return {
    counters: () => inspector.metrics(),
    mapUsage: async () => {
      const out: MapUsage[] = [];
      for (const name of PRESSURE_MAPS) {
        let map: RawMap;
        try {
          map = RawMap.openPinned(inspector.pinPath(name));
        } catch (err) {
          if (isKernelError(err, 'ENOENT')) continue;
          throw err;
        }
        try {
          let entries = 0;
          for await (const _ of map.keys()) entries++;
          out.push({ map: name, entries, maxEntries: map.info.maxEntries });
        } finally {
          map.close();
        }
      }
      return out;
    },
  };
}

export class DatapathMetrics {
  constructor(registry: Registry, source: () => DatapathMetricsSource | undefined) {
    const registers = [registry];
    // One read of the counters map serves the four counters of a scrape (collect runs once per metric).
    let pending: Promise<MetricsRow[]> | undefined;
    const rows = (): Promise<MetricsRow[]> | undefined => {
      const s = source();
      if (!s) return undefined;
      pending ??= s.counters().finally(() => queueMicrotask(() => (pending = undefined)));
      return pending;
    };
    const counterFromRows = (name: string, help: string, labelNames: readonly string[], pick: (r: MetricsRow) => { labels: Record<string, string>; value: number } | undefined) =>
      new Counter({
        name,
        help,
        labelNames,
        registers,
        async collect() {
          const got = rows();
          if (!got) return;
          const list = await got;
          // The kernel's counters are the truth: each scrape sets them anew.
          this.reset();
          for (const r of list) {
            const p = pick(r);
            if (p) this.inc(p.labels, p.value);
          }
        },
      });
    const forwarded = (r: MetricsRow) => r.reason === MetricsReason.FORWARDED;
    const dropped = (r: MetricsRow) => r.reason !== MetricsReason.FORWARDED && r.reason !== MetricsReason.EVENTS_LOST;
    counterFromRows('tendril_datapath_forwarded_packets_total', 'Packets the eBPF programs forwarded, by direction', ['direction'], (r) =>
      forwarded(r) ? { labels: { direction: r.direction }, value: r.packets } : undefined,
    );
    counterFromRows('tendril_datapath_forwarded_bytes_total', 'Bytes the eBPF programs forwarded, by direction', ['direction'], (r) =>
      forwarded(r) ? { labels: { direction: r.direction }, value: r.bytes } : undefined,
    );
    counterFromRows('tendril_datapath_dropped_packets_total', 'Packets the eBPF programs dropped, by reason and direction', ['reason', 'direction'], (r) =>
      dropped(r) ? { labels: { reason: r.reasonName, direction: r.direction }, value: r.packets } : undefined,
    );
    counterFromRows('tendril_datapath_dropped_bytes_total', 'Bytes the eBPF programs dropped, by reason and direction', ['reason', 'direction'], (r) =>
      dropped(r) ? { labels: { reason: r.reasonName, direction: r.direction }, value: r.bytes } : undefined,
    );
    counterFromRows('tendril_datapath_monitor_events_lost_total', 'Monitor events the programs could not put in the full ring buffer', [], (r) =>
      r.reason === MetricsReason.EVENTS_LOST ? { labels: {}, value: r.packets } : undefined,
    );

    let pendingUsage: Promise<MapUsage[]> | undefined;
    const usage = (): Promise<MapUsage[]> | undefined => {
      const s = source();
      if (!s) return undefined;
      pendingUsage ??= s.mapUsage().finally(() => queueMicrotask(() => (pendingUsage = undefined)));
      return pendingUsage;
    };
    const gaugeFromUsage = (name: string, help: string, labelNames: readonly string[], emit: (g: Gauge, list: MapUsage[]) => void) =>
      new Gauge({
        name,
        help,
        labelNames,
        registers,
        async collect() {
          const got = usage();
          if (!got) return;
          const list = await got;
          this.reset();
          emit(this, list);
        },
      });
    gaugeFromUsage('tendril_datapath_conntrack_entries', 'Conntrack entries, by table (tcp, any)', ['table'], (g, list) => {
      for (const [table, map] of CT_TABLES) {
        const u = list.find((x) => x.map === map);
        if (u) g.set({ table }, u.entries);
      }
    });
    gaugeFromUsage('tendril_datapath_map_entries', 'Entries in each eBPF map that fills with traffic or cluster state', ['map'], (g, list) => {
      for (const u of list) g.set({ map: u.map }, u.entries);
    });
    gaugeFromUsage('tendril_datapath_map_pressure', 'Fill of each eBPF map: entries over max_entries (1 = full, inserts fail)', ['map'], (g, list) => {
      for (const u of list) g.set({ map: u.map }, u.maxEntries > 0 ? u.entries / u.maxEntries : 0);
    });
  }
}
