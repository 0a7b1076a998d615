/**
 * tendril-operator's flags: parsed by commander, validated with zod into an
 * OperatorConfig (as the agent's config.ts does). Durations take Go-style
 * units (500ms, 30s, 15m, 1h), as Cilium's operator flags do.
 */
import { hostname } from 'node:os';
import { Command, Option } from 'commander';
import { z } from 'zod';
import { ConfigError } from '../errors/configError.js';
import { IpamError } from '../ipam/errors.js';
import { LOG_FORMATS } from '../logging/logger.js';
import { isServeAddress } from '../metrics/metricsServer.js';
import { tendrilVersion } from '../version.js';
import { CidrPool } from './cidrPool.js';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace'] as const;
export const DEFAULT_HEALTH_ADDR = '127.0.0.1:9963';
export const DEFAULT_NAMESPACE = 'kube-system';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/;
const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 } as const;

/** "15m" → 900000; undefined when the text is not a duration. */
export function parseDuration(text: string): number | undefined {
  const m = DURATION.exec(text);
  if (m === null) return undefined;
  return Math.round(Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS]);
}

export const OperatorConfigSchema = z
  .object({
    kubeconfig: z.string().min(1).optional(),
    apiServer: z.string().min(1).optional(),
    /** Where the election Lease and the nodes' Leases live. */
    namespace: z.string().regex(DNS_LABEL, 'must be a namespace name (a DNS label)'),
    /** spec.holderIdentity of the election Lease. */
    id: z.string().min(1).max(253),
    healthAddr: z.string().refine(isServeAddress, { message: 'must be host:port, [ipv6]:port or :port, such as 127.0.0.1:9963' }),
    /** The election Lease's spec.leaseDurationSeconds (renewed every third of it). */
    leaseDurationSeconds: z.number().int().min(1).max(3600),
    identityGcGraceMs: z.number().int().min(0),
    gcIntervalMs: z.number().int().min(100).max(86_400_000),
    clusterPoolCidrs: z.array(z.string()),
    clusterPoolMaskSize: z.number().int().min(1).max(32),
    clusterPoolMaskSizeV6: z.number().int().min(1).max(128),
    logLevel: z.enum(LOG_LEVELS),
    logFormat: z.enum(LOG_FORMATS),
  })
  .superRefine((c, ctx) => {
    if (c.clusterPoolCidrs.length === 0) return;
    try {
      // The pools as the controller will build them: CIDRs, overlaps, masks that fit.
      new CidrPool({ cidrs: c.clusterPoolCidrs, maskSize: { 4: c.clusterPoolMaskSize, 6: c.clusterPoolMaskSizeV6 } });
    } catch (err) {
      if (!(err instanceof IpamError)) throw err;
      ctx.addIssue({ code: 'custom', path: ['clusterPoolCidrs'], message: err.message });
    }
  });

export type OperatorConfig = z.infer<typeof OperatorConfigSchema>;

export interface OperatorFlags {
  k8sKubeconfig?: string;
  k8sApiServer?: string;
  k8sNamespace?: string;
  id?: string;
  healthAddr?: string;
  leaderElectionLeaseDuration?: string;
  identityGcGrace?: string;
  gcInterval?: string;
  clusterPoolCidr?: string[];
  clusterPoolMaskSize?: string;
  clusterPoolMaskSizeV6?: string;
  logLevel?: string;
  logFormat?: string;
}

const list = (v: string, prev: string[] = []) => [...prev, ...v.split(',').filter((s) => s !== '')];

export function operatorCommand(): Command {
  return new Command('tendril-operator')
    .description('tendril-operator: identity and endpoint garbage collection and cluster-pool CIDR allocation for the Kubernetes-backed cluster mode; one leader at a time (Lease tendril-operator)')
    .version(tendrilVersion())
    .option('--k8s-kubeconfig <file>', 'the Kubernetes API server to follow (default: in-cluster when run in a pod)')
    .option('--k8s-api-server <url>', 'the Kubernetes API server\'s URL, over the kubeconfig\'s or the in-cluster one')
    .option('--k8s-namespace <ns>', `namespace of the leader election Lease and the nodes' Leases (default ${DEFAULT_NAMESPACE})`)
    .option('--id <identity>', 'holder identity in the leader election Lease (default: hostname_pid)')
    .option('--health-addr <host:port>', `serve GET /healthz and GET /metrics here (default ${DEFAULT_HEALTH_ADDR})`)
    .option('--leader-election-lease-duration <duration>', 'leader Lease duration, renewed every third of it; whole seconds (default 15s)')
    .option('--identity-gc-grace <duration>', 'how long an identity no endpoint names is kept before it is deleted (default 15m)')
    .option('--gc-interval <duration>', 'how often the leader runs identity and endpoint GC (default 1m)')
    .option('--cluster-pool-cidr <cidr[,cidr]>', 'cluster-pool: a cluster CIDR (IPv4 or IPv6) to hand per-node CIDRs from; repeatable (default: none, no allocation)', list)
    .option('--cluster-pool-mask-size <n>', 'cluster-pool: prefix length of an IPv4 per-node CIDR (default 24)')
    .option('--cluster-pool-mask-size-v6 <n>', 'cluster-pool: prefix length of an IPv6 per-node CIDR (default 112)')
    .addOption(new Option('--log-level <level>', 'log level (default info)').choices([...LOG_LEVELS]))
    .addOption(new Option('--log-format <format>', 'json, text, or auto (default): text when logging to a terminal, JSON otherwise').choices([...LOG_FORMATS]))
    .action(() => undefined)
    .exitOverride();
}

function duration(flag: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  const ms = parseDuration(text);
  if (ms === undefined) throw new ConfigError(`${flag} must be a duration such as 500ms, 30s, 15m or 1h, got "${text}"`);
  return ms;
}

function whole(flag: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text)) throw new ConfigError(`${flag} must be a whole number, got "${text}"`);
  return Number(text);
}

/** The flags over the defaults, validated; ConfigError with one line per problem. */
export function operatorConfig(flags: OperatorFlags): OperatorConfig {
  const leaseMs = duration('--leader-election-lease-duration', flags.leaderElectionLeaseDuration, 15_000);
  if (leaseMs % 1000 !== 0) throw new ConfigError(`--leader-election-lease-duration must be whole seconds (a Lease holds seconds), got "${flags.leaderElectionLeaseDuration}"`);
  const raw = {
    ...(flags.k8sKubeconfig === undefined ? {} : { kubeconfig: flags.k8sKubeconfig }),
    ...(flags.k8sApiServer === undefined ? {} : { apiServer: flags.k8sApiServer }),
    namespace: flags.k8sNamespace ?? DEFAULT_NAMESPACE,
    id: flags.id ?? `${hostname()}_${process.pid}`,
    healthAddr: flags.healthAddr ?? DEFAULT_HEALTH_ADDR,
    leaseDurationSeconds: leaseMs / 1000,
    identityGcGraceMs: duration('--identity-gc-grace', flags.identityGcGrace, 15 * 60_000),
    gcIntervalMs: duration('--gc-interval', flags.gcInterval, 60_000),
    clusterPoolCidrs: flags.clusterPoolCidr ?? [],
    clusterPoolMaskSize: whole('--cluster-pool-mask-size', flags.clusterPoolMaskSize, 24),
    clusterPoolMaskSizeV6: whole('--cluster-pool-mask-size-v6', flags.clusterPoolMaskSizeV6, 112),
    logLevel: flags.logLevel ?? process.env.TENDRIL_LOG_LEVEL ?? 'info',
    logFormat: flags.logFormat ?? 'auto',
  };
  const parsed = OperatorConfigSchema.safeParse(raw);
  if (parsed.success) return parsed.data;
  const flagOf: Record<string, string> = {
    namespace: '--k8s-namespace',
    id: '--id',
    healthAddr: '--health-addr',
    leaseDurationSeconds: '--leader-election-lease-duration',
    identityGcGraceMs: '--identity-gc-grace',
    gcIntervalMs: '--gc-interval',
    clusterPoolCidrs: '--cluster-pool-cidr',
    clusterPoolMaskSize: '--cluster-pool-mask-size',
    clusterPoolMaskSizeV6: '--cluster-pool-mask-size-v6',
    logLevel: '--log-level',
  };
  throw new ConfigError(parsed.error.issues.map((i) => `${flagOf[String(i.path[0])] ?? String(i.path[0])}: ${i.message}`).join('; '));
}
