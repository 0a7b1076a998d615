#!/usr/bin/env node
// tendril-agent: the node agent. Flags override the optional YAML config file.
import { join } from 'node:path';
import { Command, CommanderError, Option } from 'commander';
import { pino } from 'pino';
import { parseKvstoreOpts } from '../kvstore/factory.js';
import { KvstoreError } from '../kvstore/errors.js';
import { describeKvstoreOptions } from '../kvstore/optionKeys.js';
import { Agent } from './agent.js';
import { ConfigError, DATAPATH_KINDS, defaultConfig, IPAM_MODES, LOG_LEVELS, readConfigFile, TRACE_LEVELS, validateConfig } from './config.js';
import { OwnershipError } from './ownershipError.js';

const list = (v: string, prev: string[] = []) => [...prev, ...v.split(',').filter((s) => s !== '')];
const repeat = (v: string, prev: string[] = []) => [...prev, v];
const int = (name: string) => (v: string) => {
  if (!/^\d+$/.test(v)) throw new ConfigError(`${name} must be a whole number, got "${v}"`);
  return Number(v);
};

interface Flags {
  config?: string;
  nodeName?: string;
  stateDir?: string;
  libDir?: string;
  socket?: string;
  kvstore?: string;
  kvstoreOpt?: string[];
  ipam?: string;
  podCidr?: string[];
  clusterPoolCidr?: string[];
  clusterPoolMaskSize?: number;
  poolCidr?: string[];
  blockSize?: number;
  strictAffinity?: boolean;
  cniPath?: string[];
  mtu?: number;
  nodeIp?: string;
  leaseTtl?: number;
  masqueradeCidr?: string[];
  ipamExpiration?: number;
  bpffsRoot?: string;
  datapath?: string;
  traceLevel?: string;
  bpfLxcAttach?: string;
  bpfPolicyEndpointMax?: number;
  bpfLxcMax?: number;
  bpfIpcacheMax?: number;
  bpfPolicyMax?: number;
  bpfCtTcpMax?: number;
  bpfCtAnyMax?: number;
  bpfFragMax?: number;
  bpfEventsMax?: number;
  logFile?: string;
  logLevel?: string;
}

export function agentCommand(): Command {
  return new Command('tendril-agent')
    .description('tendril node agent: IPAM, endpoints and the datapath, serving the API on a unix socket')
    .option('--config <file>', 'YAML config file (keys as the long flags in camelCase)')
    .option('--node-name <name>', 'this node\'s name (default: hostname)')
    .option('--state-dir <dir>', 'runtime state: socket, endpoints, deletion queue (default /var/run/tendril)')
    .option('--lib-dir <dir>', 'durable data: the embedded kvstore (default /var/lib/tendril)')
    .option('--socket <path>', 'API socket (default <state-dir>/tendril.sock)')
    .addOption(new Option('--kvstore <kind>', 'kvstore backend').choices(['embedded', 'etcd']))
    .option(
      '--kvstore-opt <key=value>',
      `kvstore option, repeatable; ${describeKvstoreOptions()}`,
      repeat,
    )
    .addOption(new Option('--ipam <mode>', 'IPAM mode').choices([...IPAM_MODES]))
    .option('--pod-cidr <cidr[,cidr]>', 'host-scope: this node\'s pod CIDRs', list)
    .option('--cluster-pool-cidr <cidr[,cidr]>', 'cluster-pool: cluster CIDRs', list)
    .option('--cluster-pool-mask-size <n>', 'cluster-pool: per-node prefix length', int('--cluster-pool-mask-size'))
    .option('--pool-cidr <cidr[,cidr]>', 'block: IP pools', list)
    .option('--block-size <n>', 'block: block prefix length (default 26 / 122)', int('--block-size'))
    .option('--strict-affinity', 'block: never borrow from other hosts\' blocks')
    .option('--cni-path <dir[,dir]>', 'delegated: where the IPAM plugin lives', list)
    .option('--mtu <n>', 'pod interface MTU (default 1500)', int('--mtu'))
    .option('--node-ip <ip>', 'this node\'s IP as other nodes reach it (default: its IPv4 router address)')
    .option('--lease-ttl <s>', 'kvstore lease TTL: a dead node\'s entries go this long after it (default 15)', int('--lease-ttl'))
    .option('--masquerade-cidr <cidr[,cidr]>', 'masquerade traffic from these CIDRs leaving them (default: the pod CIDRs)', list)
    .option('--ipam-expiration <ms>', 'how long an unconfirmed ADD allocation lives (default 60000)', int('--ipam-expiration'))
    .option('--bpffs-root <dir>', 'bpffs mount for pinned datapath objects (default /sys/fs/bpf)')
    .addOption(new Option('--datapath <kind>', 'bpf: policy enforced by eBPF programs (default); routing: routes only, for nodes without BPF').choices([...DATAPATH_KINDS]))
    .addOption(new Option('--trace-level <level>', 'eBPF trace events: one per new flow (default), every packet, or none').choices([...TRACE_LEVELS]))
    .addOption(new Option('--bpf-lxc-attach <how>', 'how programs go on pod devices: clsact filters (default; ~2 ms per ADD) or pinned tcx links (each attach waits out an RCU grace period: ~27 ms per ADD)').choices(['tcx', 'clsact']))
    .option('--bpf-policy-endpoint-max <n>', 'policy map entries one endpoint may hold; more fails its regeneration (default 16384)', int('--bpf-policy-endpoint-max'))
    .option('--bpf-lxc-max <n>', 'eBPF endpoint map entries (default 65535)', int('--bpf-lxc-max'))
    .option('--bpf-ipcache-max <n>', 'eBPF ipcache entries (default 512000)', int('--bpf-ipcache-max'))
    .option('--bpf-policy-max <n>', 'eBPF policy entries, all endpoints together (default 4194304)', int('--bpf-policy-max'))
    .option('--bpf-ct-tcp-max <n>', 'eBPF TCP conntrack entries (default 524288)', int('--bpf-ct-tcp-max'))
    .option('--bpf-ct-any-max <n>', 'eBPF non-TCP conntrack entries (default 262144)', int('--bpf-ct-any-max'))
    .option('--bpf-frag-max <n>', 'eBPF fragment tracking entries (default 8192)', int('--bpf-frag-max'))
    .option('--bpf-events-max <bytes>', 'eBPF event ring buffer size in bytes, a power of two (default 4194304)', int('--bpf-events-max'))
    .option('--log-file <path>', 'log to this file instead of stderr')
    .addOption(new Option('--log-level <level>', 'log level').choices([...LOG_LEVELS]))
    .exitOverride();
}

export async function resolveConfig(flags: Flags) {
  const fromFile = flags.config ? await readConfigFile(flags.config) : {};
  const merged: Record<string, unknown> = { ...defaultConfig(), ...fromFile };
  const set = (key: string, v: unknown) => {
    if (v !== undefined) merged[key] = v;
  };
  set('nodeName', flags.nodeName);
  set('stateDir', flags.stateDir);
  set('libDir', flags.libDir);
  set('socket', flags.socket ?? (flags.stateDir || fromFile.stateDir ? join(String(flags.stateDir ?? fromFile.stateDir), 'tendril.sock') : undefined));
  set('kvstore', flags.kvstore);
  if (flags.kvstoreOpt) merged.kvstoreOpts = parseKvstoreOpts(flags.kvstoreOpt);
  set('ipam', flags.ipam);
  set('podCidrs', flags.podCidr);
  set('clusterPoolCidrs', flags.clusterPoolCidr);
  set('clusterPoolMaskSize', flags.clusterPoolMaskSize);
  set('poolCidrs', flags.poolCidr);
  set('blockSize', flags.blockSize);
  set('strictAffinity', flags.strictAffinity);
  set('cniPath', flags.cniPath);
  set('mtu', flags.mtu);
  set('nodeIp', flags.nodeIp);
  set('leaseTtlSeconds', flags.leaseTtl);
  set('masqueradeCidrs', flags.masqueradeCidr);
  set('ipamExpirationMs', flags.ipamExpiration);
  set('bpffsRoot', flags.bpffsRoot);
  set('datapath', flags.datapath);
  set('traceLevel', flags.traceLevel);
  set('bpfLxcAttach', flags.bpfLxcAttach);
  set('policyEndpointMaxEntries', flags.bpfPolicyEndpointMax);
  const sizes: Record<string, number | undefined> = { lxc: flags.bpfLxcMax, ipcache: flags.bpfIpcacheMax, policy: flags.bpfPolicyMax, ctTcp: flags.bpfCtTcpMax, ctAny: flags.bpfCtAnyMax, frag: flags.bpfFragMax, events: flags.bpfEventsMax };
  const sizeFlags = Object.fromEntries(Object.entries(sizes).filter(([, v]) => v !== undefined));
  if (Object.keys(sizeFlags).length > 0) merged.bpfMapSizes = { ...(fromFile.bpfMapSizes as Record<string, number> | undefined), ...sizeFlags };
  set('logFile', flags.logFile);
  set('logLevel', flags.logLevel);
  return validateConfig(merged);
}

async function main(argv: string[]): Promise<number> {
  const cmd = agentCommand();
  let flags: Flags;
  try {
    cmd.parse(argv);
    flags = cmd.opts<Flags>();
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode;
    throw err;
  }
  let config;
  try {
    config = await resolveConfig(flags);
  } catch (err) {
    process.stderr.write(`tendril-agent: ${(err as Error).message}\n`);
    return 2;
  }
  if (process.getuid?.() !== 0) {
    process.stderr.write('tendril-agent: must run as root (it changes the host\'s network)\n');
    return 2;
  }
  const log = pino(
    { name: 'tendril-agent', level: config.logLevel, base: { pid: process.pid, node: config.nodeName } },
    // The log names pods, addresses and the kvstore's endpoints: root-only, as the socket.
    pino.destination(config.logFile ? { dest: config.logFile, mkdir: true, sync: false, mode: 0o600 } : 2),
  );
  let agent: Agent;
  try {
    agent = await Agent.start(config, log);
  } catch (err) {
    if (err instanceof OwnershipError) {
      // Another agent owns this node: one line, and the log file (if any) says it too.
      if (config.logFile) log.fatal({ err }, 'not starting');
      log.flush();
      process.stderr.write(`tendril-agent: ${err.message}\n`);
      return 1;
    }
    if (err instanceof KvstoreError) {
      // The message is the diagnosis (a damaged store says what to do): one line, no stack; the log file (if any) says it too.
      if (config.logFile) log.fatal({ err: err.toJSON() }, 'agent failed to start');
      log.flush();
      process.stderr.write(`tendril-agent: failed to start: ${err.message}\n`);
      return 1;
    }
    log.fatal({ err }, 'agent failed to start');
    process.stderr.write(`tendril-agent: failed to start: ${(err as Error).message}\n`);
    return 1;
  }
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      log.info({ signal }, 'stopping');
      resolve();
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  await agent.stop();
  log.flush();
  return 0;
}

process.exitCode = await main(process.argv);
