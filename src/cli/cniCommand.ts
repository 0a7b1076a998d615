import { createHash } from 'node:crypto';
import type { Command } from 'commander';
import { type CniArgs, parseCniArgs } from '../cni/cniArgs.js';
import { asCniError, CniError, CniErrorCode } from '../cni/errors.js';
import { validateAbsolutePath } from '../cni/names.js';
import { versionAtLeast } from '../cni/version.js';
import { DEFAULT_CACHE_DIR } from '../libcni/defaults.js';
import type { RuntimeConf } from '../libcni/runtime.js';

/** libcni is loaded when a cni command runs: its schemas cost every other command start-up time. */
const libcni = () => import('../libcni/index.js');


/**
 * `tendril cni …`: a runtime for humans and scripts, compatible with the reference
 * cnitool (same verbs, same environment variables, same derived container ID).
 */
export const DEFAULT_NETCONF_PATH = '/etc/cni/net.d';
export const DEFAULT_CNI_PATH = '/opt/cni/bin:/usr/lib/cni';

interface CniCliEnv {
  netconfPath: string;
  pluginDirs: string[];
  ifName: string;
  args: CniArgs;
  capabilityArgs: Record<string, unknown>;
  containerId?: string;
}

function readCliEnv(env: NodeJS.ProcessEnv): CniCliEnv {
  const pluginDirs = (env.CNI_PATH || DEFAULT_CNI_PATH).split(':').filter((d) => d !== '');
  for (const d of pluginDirs) validateAbsolutePath(d, 'CNI_PATH entry');
  let capabilityArgs: Record<string, unknown> = {};
  if (env.CAP_ARGS) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(env.CAP_ARGS);
    } catch (err) {
      throw new CniError(CniErrorCode.InvalidEnvironmentVariables, `CAP_ARGS is not valid JSON: ${(err as Error).message}`);
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
      throw new CniError(CniErrorCode.InvalidEnvironmentVariables, 'CAP_ARGS must be a JSON object');
    }
    capabilityArgs = parsed as Record<string, unknown>;
  }
  return {
    netconfPath: env.NETCONFPATH || DEFAULT_NETCONF_PATH,
    pluginDirs,
    ifName: env.CNI_IFNAME || 'eth0',
    args: parseCniArgs(env.CNI_ARGS ?? ''),
    capabilityArgs,
    ...(env.CNI_CONTAINERID ? { containerId: env.CNI_CONTAINERID } : {}),
  };
}

/** cnitool's container ID for a netns path: stable, so DEL finds what ADD cached. */
export function containerIdForNetns(netns: string): string {
  return `cnitool-${createHash('sha512').update(netns).digest('hex').slice(0, 20)}`;
}

interface CommonOpts {
  cacheDir: string;
}

async function runVerb(verb: string, network: string, netns: string | undefined, opts: CommonOpts & { valid?: string[] }): Promise<void> {
  const env = readCliEnv(process.env);
  const { CniRuntime, loadConfList } = await libcni();
  const runtime = new CniRuntime({ pluginDirs: env.pluginDirs, cacheDir: opts.cacheDir });
  const list = await loadConfList(env.netconfPath, network);
  const needsNetns = verb === 'add' || verb === 'check' || verb === 'del';
  if (needsNetns) {
    if (!netns) throw new CniError(CniErrorCode.InvalidEnvironmentVariables, `${verb} needs a netns path`);
    validateAbsolutePath(netns, 'netns path');
  }
  const rt = (): RuntimeConf => ({
    containerId: env.containerId ?? containerIdForNetns(netns ?? ''),
    netns: netns ?? '',
    ifName: env.ifName,
    args: env.args,
    capabilityArgs: env.capabilityArgs,
  });
  switch (verb) {
    case 'add': {
      const result = await runtime.addNetworkList(list, rt());
      process.stdout.write(`${JSON.stringify(result, null, 4)}\n`);
      return;
    }
    case 'del':
      return runtime.delNetworkList(list, rt());
    case 'check':
      return runtime.checkNetworkList(list, rt());
    case 'gc': {
      const validAttachments = (opts.valid ?? []).map((v) => {
        const i = v.lastIndexOf('/');
        if (i <= 0 || i === v.length - 1) throw new CniError(CniErrorCode.InvalidEnvironmentVariables, `--valid takes <containerID>/<ifname>, got "${v}"`);
        return { containerID: v.slice(0, i), ifname: v.slice(i + 1) };
      });
      return runtime.gcNetworkList(list, { validAttachments });
    }
    case 'status': {
      await runtime.getStatusNetworkList(list);
      // STATUS succeeding prints nothing in CNI: say what was asked, so silence is never the answer.
      const plugins = list.plugins.map((p) => p.network.type).join(', ');
      const version = list.cniVersion || '0.1.0';
      process.stdout.write(
        versionAtLeast(version, '1.1.0')
          ? `${list.name}: ready (STATUS answered by ${plugins})\n`
          : `${list.name}: not asked: STATUS needs cniVersion 1.1.0 or later, the list has ${version} (plugins ${plugins})\n`,
      );
      return;
    }
    case 'validate': {
      const caps = await runtime.validateNetworkList(list);
      process.stdout.write(`${JSON.stringify({ network: list.name, cniVersion: list.cniVersion, capabilities: caps })}\n`);
      return;
    }
  }
}

/** Prints a CNI error the way a plugin would, and fails the process. */
async function reportingCniErrors(fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (err) {
    const e = asCniError(err);
    process.stderr.write(`${JSON.stringify(e.toJSON(), null, 4)}\n`);
    process.exitCode = 1;
  }
}

export function registerCniCommands(program: Command): void {
  const cni = program
    .command('cni')
    .description('run CNI network configs against a network namespace, like the reference cnitool')
    .addHelpText(
      'after',
      `
Environment (as cnitool): NETCONFPATH (default ${DEFAULT_NETCONF_PATH}), CNI_PATH (default ${DEFAULT_CNI_PATH}),
CNI_IFNAME (default eth0), CNI_ARGS (k=v;k2=v2), CAP_ARGS (JSON), CNI_CONTAINERID (default derived from the netns path).`,
    );
  const cacheOpt = (c: Command) => c.option('--cache-dir <dir>', 'libcni result cache directory', DEFAULT_CACHE_DIR);
  for (const verb of ['add', 'check', 'del'] as const) {
    cacheOpt(cni.command(`${verb} <network-name> <netns-path>`).description(`${verb.toUpperCase()} the network list to the namespace`)).action(
      (network: string, netns: string, opts: CommonOpts) => reportingCniErrors(() => runVerb(verb, network, netns, opts)),
    );
  }
  cacheOpt(cni.command('gc <network-name>').description('delete cached attachments not listed as valid, then run GC (1.1.0+)'))
    .option('--valid <containerID/ifname...>', 'attachments that are still in use')
    .action((network: string, opts: CommonOpts & { valid?: string[] }) => reportingCniErrors(() => runVerb('gc', network, undefined, opts)));
  cacheOpt(cni.command('status <network-name>').description('ask every plugin of the list whether it is ready (1.1.0+)')).action(
    (network: string, opts: CommonOpts) => reportingCniErrors(() => runVerb('status', network, undefined, opts)),
  );
  cacheOpt(cni.command('validate <network-name>').description('check that every plugin exists and supports the version')).action(
    (network: string, opts: CommonOpts) => reportingCniErrors(() => runVerb('validate', network, undefined, opts)),
  );
  cni
    .command('list')
    .description('list the network configs in NETCONFPATH, and the files that failed to load')
    .action(() =>
      reportingCniErrors(async () => {
        const { loadConfigDir } = await libcni();
        const { configs, invalid } = await loadConfigDir(readCliEnv(process.env).netconfPath);
        for (const c of configs) {
          process.stdout.write(`${c.list.name}\t${c.list.cniVersion}\t${c.list.plugins.map((p) => p.network.type).join(',')}\t${c.file}\n`);
        }
        for (const i of invalid) process.stderr.write(`invalid: ${i.file}: ${i.error.message}\n`);
      }),
    );
}
