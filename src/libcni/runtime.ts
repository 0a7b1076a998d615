import {
  type AnyResult,
  type CniArgs,
  CniError,
  CniErrorCode,
  convertResult,
  decodeResult,
  formatCniArgs,
  type GcAttachment,
  type PluginVersionInfo,
  validateContainerId,
  validateInterfaceName,
  validateNetworkName,
  versionAtLeast,
} from '../cni/index.js';
import { ResultCache } from './cache.js';
import { injectConf, type NetworkConfig, type NetworkConfigList } from './conf.js';
import { type PluginExec, RawExec } from './exec.js';

/** What the runtime knows about one attachment (libcni RuntimeConf). */
export interface RuntimeConf {
  containerId: string;
  netns: string;
  ifName: string;
  args?: CniArgs;
  /** Values for the capabilities plugins declare, e.g. `{portMappings: [...]}`. */
  capabilityArgs?: Record<string, unknown>;
}

export interface GcArgs {
  validAttachments: GcAttachment[];
}

export interface CniRuntimeOptions {
  /** Directories searched for plugin binaries (CNI_PATH). */
  pluginDirs: readonly string[];
  cacheDir?: string;
  exec?: PluginExec;
  /** Environment passed to plugins besides the CNI_* variables (default: this process's). */
  baseEnv?: Readonly<Record<string, string | undefined>>;
}

/** A failure in one plugin of a chain, naming the plugin. */
export class PluginChainError extends CniError {
  constructor(
    readonly pluginType: string,
    readonly verb: string,
    cause: CniError,
  ) {
    super(cause.code, cause.msg, cause.details ? `plugin type="${pluginType}" ${verb}: ${cause.details}` : `plugin type="${pluginType}" ${verb}`);
    this.name = 'PluginChainError';
  }
}

type Verb = 'ADD' | 'DEL' | 'CHECK' | 'GC' | 'STATUS' | 'VERSION';

/**
 * The runtime side of CNI, as containerd, CRI-O and podman use libcni: runs
 * config lists of plugins, chaining results, and keeps the result cache.
 */
export class CniRuntime {
  readonly cache: ResultCache;
  private readonly exec: PluginExec;
  private readonly pluginDirs: readonly string[];
  private readonly baseEnv: Readonly<Record<string, string | undefined>>;

  constructor(opts: CniRuntimeOptions) {
    this.pluginDirs = opts.pluginDirs;
    this.cache = new ResultCache(opts.cacheDir);
    this.exec = opts.exec ?? new RawExec();
    this.baseEnv = opts.baseEnv ?? process.env;
  }

  private env(verb: Verb, rt?: RuntimeConf): Record<string, string> {
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(this.baseEnv)) {
      // A runtime's own CNI_* variables must not leak into what it passes down.
      if (v !== undefined && !k.startsWith('CNI_')) env[k] = v;
    }
    env.CNI_COMMAND = verb;
    env.CNI_PATH = this.pluginDirs.join(':');
    if (rt) {
      env.CNI_CONTAINERID = rt.containerId;
      env.CNI_NETNS = rt.netns;
      env.CNI_IFNAME = rt.ifName;
      env.CNI_ARGS = formatCniArgs(rt.args ?? []);
    }
    return env;
  }

  /** libcni buildOneConfig: name, version, prevResult and runtimeConfig injected, all else kept. */
  buildOneConfig(list: NetworkConfigList, plugin: NetworkConfig, prevResult: AnyResult | undefined, rt: RuntimeConf): NetworkConfig {
    const inject: Record<string, unknown> = { name: list.name, cniVersion: list.cniVersion };
    if (prevResult) inject.prevResult = prevResult;
    let conf = injectConf(plugin, inject);
    const runtimeConfig: Record<string, unknown> = {};
    for (const [capability, supported] of Object.entries(plugin.network.capabilities ?? {})) {
      if (!supported) continue;
      const value = rt.capabilityArgs?.[capability];
      if (value !== undefined) runtimeConfig[capability] = value;
    }
    if (Object.keys(runtimeConfig).length > 0) conf = injectConf(conf, { runtimeConfig });
    return conf;
  }

  private validateAttachment(list: NetworkConfigList, rt: RuntimeConf): void {
    validateContainerId(rt.containerId);
    validateNetworkName(list.name);
    validateInterfaceName(rt.ifName);
  }

  private async run(verb: Verb, plugin: NetworkConfig, conf: NetworkConfig, rt?: RuntimeConf): Promise<string> {
    const type = plugin.network.type;
    try {
      const path = await this.exec.findInPath(type, this.pluginDirs);
      return await this.exec.exec(path, JSON.stringify(conf.raw), this.env(verb, rt));
    } catch (err) {
      const e = err instanceof CniError ? err : new CniError(CniErrorCode.Internal, (err as Error).message);
      throw new PluginChainError(type, verb, e);
    }
  }

  async addNetworkList(list: NetworkConfigList, rt: RuntimeConf): Promise<AnyResult> {
    this.validateAttachment(list, rt);
    let prevResult: AnyResult | undefined;
    for (const plugin of list.plugins) {
      const conf = this.buildOneConfig(list, plugin, prevResult, rt);
      const stdout = await this.run('ADD', plugin, conf, rt);
      // Plugins must answer in the config's version; an empty cniVersion is read as the
      // config's version for compatibility (containernetworking/cni#895).
      const decoded = decodeResult(stdout, list.cniVersion);
      prevResult = convertResult(decoded, list.cniVersion);
    }
    if (!prevResult) throw new CniError(CniErrorCode.InvalidNetworkConfig, 'network config list has no plugins');
    await this.cache.write(
      {
        containerId: rt.containerId,
        ifName: rt.ifName,
        networkName: list.name,
        netns: rt.netns,
        cniArgs: rt.args ?? [],
        capabilityArgs: rt.capabilityArgs ?? {},
        configBytes: JSON.stringify(list.raw),
      },
      prevResult,
    );
    return prevResult;
  }

  /** The cached result of an attachment, converted to the list's version. */
  async getCachedResult(list: NetworkConfigList, rt: RuntimeConf): Promise<AnyResult | undefined> {
    const cached = await this.cache.read({ networkName: list.name, containerId: rt.containerId, ifName: rt.ifName });
    if (!cached?.result) return undefined;
    const decoded = decodeResult(JSON.stringify(cached.result), list.cniVersion);
    return convertResult(decoded, list.cniVersion);
  }

  async delNetworkList(list: NetworkConfigList, rt: RuntimeConf): Promise<void> {
    this.validateAttachment(list, rt);
    let cached: AnyResult | undefined;
    // From 0.4.0 on, DEL gets the ADD's result as prevResult.
    if (versionAtLeast(list.cniVersion || '0.1.0', '0.4.0')) {
      cached = await this.getCachedResult(list, rt);
    }
    for (const plugin of [...list.plugins].reverse()) {
      const conf = this.buildOneConfig(list, plugin, cached, rt);
      await this.run('DEL', plugin, conf, rt);
    }
    await this.cache.remove({ networkName: list.name, containerId: rt.containerId, ifName: rt.ifName });
  }

  async checkNetworkList(list: NetworkConfigList, rt: RuntimeConf): Promise<void> {
    this.validateAttachment(list, rt);
    if (!versionAtLeast(list.cniVersion || '0.1.0', '0.4.0')) {
      throw new CniError(CniErrorCode.IncompatibleVersion, `configuration version "${list.cniVersion}" does not support the CHECK command`);
    }
    if (list.disableCheck) return;
    const cached = await this.getCachedResult(list, rt);
    if (!cached) {
      throw new CniError(CniErrorCode.UnknownContainer, `no cached result for network "${list.name}", container ${rt.containerId}, interface ${rt.ifName}`);
    }
    for (const plugin of list.plugins) {
      const conf = this.buildOneConfig(list, plugin, cached, rt);
      await this.run('CHECK', plugin, conf, rt);
    }
  }

  /**
   * Removes attachments the runtime no longer considers valid: a synthesised DEL
   * for each cached attachment of this network not in `validAttachments`, then
   * (from 1.1.0) the GC verb so plugins can drop state the cache never knew of.
   */
  async gcNetworkList(list: NetworkConfigList, args: GcArgs): Promise<void> {
    if (list.disableGC) return;
    const errors: Error[] = [];
    const valid = new Set(args.validAttachments.map((a) => `${a.containerID}\0${a.ifname}`));
    for (const a of await this.cache.list()) {
      if (a.networkName !== list.name || valid.has(`${a.containerId}\0${a.ifName}`)) continue;
      try {
        await this.delNetworkList(list, {
          containerId: a.containerId,
          netns: a.netns,
          ifName: a.ifName,
          args: a.cniArgs,
          capabilityArgs: a.capabilityArgs,
        });
      } catch (err) {
        errors.push(new Error(`failed to delete stale attachment ${a.containerId} ${a.ifName}: ${(err as Error).message}`));
      }
    }
    if (versionAtLeast(list.cniVersion || '0.1.0', '1.1.0')) {
      for (const plugin of list.plugins) {
        try {
          const conf = injectConf(plugin, {
            name: list.name,
            cniVersion: list.cniVersion,
            'cni.dev/valid-attachments': args.validAttachments,
            // The spec text once named the key this way; plugins built against it read it.
            'cni.dev/attachments': args.validAttachments,
          });
          await this.run('GC', plugin, conf);
        } catch (err) {
          errors.push(err as Error);
        }
      }
    }
    if (errors.length === 1) throw errors[0];
    if (errors.length > 1) {
      throw new CniError(CniErrorCode.Internal, `garbage collection of network "${list.name}" failed`, errors.map((e) => e.message).join('; '));
    }
  }

  /** STATUS on every plugin of the list (1.1.0+); older lists are assumed ready. */
  async getStatusNetworkList(list: NetworkConfigList): Promise<void> {
    if (!versionAtLeast(list.cniVersion || '0.1.0', '1.1.0')) return;
    for (const plugin of list.plugins) {
      const conf = injectConf(plugin, { name: list.name, cniVersion: list.cniVersion });
      await this.run('STATUS', plugin, conf);
    }
  }

  /** Asks a plugin which versions it supports. */
  async getVersionInfo(pluginType: string): Promise<PluginVersionInfo> {
    const path = await this.exec.findInPath(pluginType, this.pluginDirs);
    const stdout = await this.exec.exec(path, '{"cniVersion":"1.1.0"}', this.env('VERSION'));
    let info: unknown;
    try {
      info = JSON.parse(stdout);
    } catch (err) {
      throw new CniError(CniErrorCode.DecodingFailure, `plugin ${pluginType} printed invalid version info`, (err as Error).message);
    }
    const v = info as Partial<PluginVersionInfo>;
    if (!Array.isArray(v.supportedVersions)) {
      // Plugins that predate VERSION's supportedVersions speak only 0.1.0 and 0.2.0.
      return { cniVersion: String(v.cniVersion ?? '0.2.0'), supportedVersions: ['0.1.0', '0.2.0'] };
    }
    return { cniVersion: String(v.cniVersion), supportedVersions: v.supportedVersions.map(String) };
  }

  /**
   * Checks a list without running it: every plugin exists, supports the list's
   * version, and every capability the list relies on is declared. Returns the
   * capabilities the list's plugins declare.
   */
  async validateNetworkList(list: NetworkConfigList): Promise<string[]> {
    validateNetworkName(list.name);
    const caps = new Set<string>();
    for (const plugin of list.plugins) {
      const info = await this.getVersionInfo(plugin.network.type);
      if (!info.supportedVersions.includes(list.cniVersion)) {
        throw new CniError(
          CniErrorCode.IncompatibleVersion,
          `plugin type="${plugin.network.type}" does not support config version "${list.cniVersion}"`,
          `plugin supports [${info.supportedVersions.join(' ')}]`,
        );
      }
      const ipamType = plugin.network.ipam?.type;
      if (ipamType) await this.exec.findInPath(ipamType, this.pluginDirs);
      for (const [c, on] of Object.entries(plugin.network.capabilities ?? {})) if (on) caps.add(c);
    }
    return [...caps].sort();
  }
}
