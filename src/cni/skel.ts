import { asCniError, CniError, CniErrorCode } from './errors.js';
import { convertResult } from './convert.js';
import { validateContainerId, validateInterfaceName } from './names.js';
import { type NetConf, parseNetConf, requireNetworkName, validAttachments } from './netconf.js';
import type { AnyResult, CurrentResult, GcAttachment } from './types.js';
import {
  CURRENT_VERSION,
  decodeVersion,
  type PluginVersionInfo,
  reconcileVersion,
  versionAtLeast,
} from './version.js';

export type CniCommand = 'ADD' | 'DEL' | 'CHECK' | 'GC' | 'STATUS' | 'VERSION';

/**
 * Which environment variables each verb requires (CNI spec, "Parameters").
 * CNI_COMMAND is always required; CNI_ARGS and CNI_NETNS on DEL are optional.
 */
export const REQUIRED_ENV: Record<string, readonly CniCommand[]> = {
  CNI_CONTAINERID: ['ADD', 'CHECK', 'DEL'],
  CNI_NETNS: ['ADD', 'CHECK'],
  CNI_IFNAME: ['ADD', 'CHECK', 'DEL'],
  CNI_ARGS: [],
  CNI_PATH: ['ADD', 'CHECK', 'DEL', 'GC', 'STATUS'],
};

/** The verbs that need at least a given config version. */
const MIN_CONFIG_VERSION: Partial<Record<CniCommand, string>> = { CHECK: '0.4.0', GC: '1.1.0', STATUS: '1.1.0' };

/** What a verb's handler receives: the env, the raw and parsed config, and the prevResult. */
export interface CmdArgs {
  command: CniCommand;
  containerId: string;
  netns: string;
  ifName: string;
  args: string;
  path: string;
  stdinData: string;
  conf: NetConf;
  cniVersion: string;
  /** The prevResult of a chained call, normalised to the newest version. */
  prevResult?: CurrentResult;
  /** GC only: the attachments the runtime still considers live. */
  validAttachments?: GcAttachment[];
}

export interface PluginFuncs {
  add(args: CmdArgs): Promise<AnyResult>;
  del(args: CmdArgs): Promise<void>;
  check?(args: CmdArgs): Promise<void>;
  gc?(args: CmdArgs): Promise<void>;
  status?(args: CmdArgs): Promise<void>;
}

export interface SkelIO {
  env: Readonly<Record<string, string | undefined>>;
  /** Reads all of stdin; only called for verbs that take a config. */
  readStdin(): Promise<string>;
  stdout: { write(s: string): unknown };
  stderr: { write(s: string): unknown };
}

const COMMANDS: readonly CniCommand[] = ['ADD', 'DEL', 'CHECK', 'GC', 'STATUS', 'VERSION'];

function readEnv(io: SkelIO): { command: CniCommand; vars: Record<string, string> } {
  const command = io.env.CNI_COMMAND ?? '';
  const missing: string[] = [];
  if (command === '') missing.push('CNI_COMMAND');
  const vars: Record<string, string> = {};
  for (const [name, verbs] of Object.entries(REQUIRED_ENV)) {
    const value = io.env[name] ?? '';
    vars[name] = value;
    if (value === '' && verbs.includes(command as CniCommand)) missing.push(name);
  }
  if (missing.length > 0) {
    throw new CniError(CniErrorCode.InvalidEnvironmentVariables, `required env variables [${missing.join(',')}] missing`);
  }
  if (!COMMANDS.includes(command as CniCommand)) {
    throw new CniError(CniErrorCode.InvalidEnvironmentVariables, `unknown CNI_COMMAND: ${command}`);
  }
  return { command: command as CniCommand, vars };
}

function parseConf(stdinData: string): NetConf {
  let value: unknown;
  try {
    value = JSON.parse(stdinData);
  } catch (err) {
    throw new CniError(CniErrorCode.DecodingFailure, `error unmarshalling network config: ${(err as Error).message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new CniError(CniErrorCode.DecodingFailure, 'error unmarshalling network config: not a JSON object');
  }
  return parseNetConf(value);
}

/** Code 1 when the config's version does not allow the verb (CHECK < 0.4.0, GC and STATUS < 1.1.0) or is not supported. */
export function checkVerbVersion(command: CniCommand, configVersion: string, info: PluginVersionInfo): void {
  const min = MIN_CONFIG_VERSION[command];
  if (min && !versionAtLeast(configVersion, min)) {
    throw new CniError(CniErrorCode.IncompatibleVersion, `config version does not allow ${command}`);
  }
  reconcileVersion(configVersion, info);
}

/**
 * The network config of a call as the skel takes it: decoded, named, and of a
 * version that allows the verb. Exported for callers that reach a plugin's
 * verbs without the skel in front (the agent's deletion queue).
 */
export function parseCallConf(command: CniCommand, stdinData: string, info: PluginVersionInfo): { conf: NetConf; cniVersion: string } {
  const conf = parseConf(stdinData);
  requireNetworkName(conf);
  const cniVersion = decodeVersion(stdinData);
  checkVerbVersion(command, cniVersion, info);
  return { conf, cniVersion };
}

async function buildCmdArgs(command: CniCommand, vars: Record<string, string>, io: SkelIO, info: PluginVersionInfo): Promise<CmdArgs> {
  let stdinData: string;
  try {
    stdinData = await io.readStdin();
  } catch (err) {
    throw new CniError(CniErrorCode.IOFailure, `error reading from stdin: ${(err as Error).message}`);
  }
  if (command === 'ADD' || command === 'CHECK' || command === 'DEL') {
    validateContainerId(vars.CNI_CONTAINERID ?? '');
    validateInterfaceName(vars.CNI_IFNAME ?? '');
  }
  const { conf, cniVersion } = parseCallConf(command, stdinData, info);
  const args: CmdArgs = {
    command,
    containerId: vars.CNI_CONTAINERID ?? '',
    netns: vars.CNI_NETNS ?? '',
    ifName: vars.CNI_IFNAME ?? '',
    args: vars.CNI_ARGS ?? '',
    path: vars.CNI_PATH ?? '',
    stdinData,
    conf,
    cniVersion,
  };
  if (conf.prevResult !== undefined && versionAtLeast(cniVersion, '0.3.0')) {
    try {
      // Loaded only for chained calls: the schema code costs start-up time every plugin run would pay.
      const { parseResult, toCurrent } = await import('./result.js');
      args.prevResult = toCurrent(parseResult(cniVersion, conf.prevResult));
    } catch (err) {
      throw new CniError(CniErrorCode.DecodingFailure, 'could not parse prevResult', asCniError(err).message);
    }
  }
  if (command === 'GC') {
    args.validAttachments = validAttachments(conf);
  }
  return args;
}

/**
 * VERSION answers with the cniVersion the runtime put on stdin (spec, "VERSION
 * Success"); stdin that is missing, unreadable or not a version means the newest.
 */
async function versionQueried(io: SkelIO): Promise<string> {
  let text: string;
  try {
    text = await io.readStdin();
  } catch {
    return CURRENT_VERSION; // VERSION needs no stdin; a runtime may send none
  }
  try {
    const v = (JSON.parse(text) as { cniVersion?: unknown }).cniVersion;
    return typeof v === 'string' && /^\d+\.\d+\.\d+$/.test(v) ? v : CURRENT_VERSION;
  } catch {
    return CURRENT_VERSION; // not JSON: answer with the newest, as for no stdin
  }
}

/**
 * The plugin-side dispatcher: validates env and stdin, negotiates the version,
 * runs the verb, prints the result in the config's version or the error JSON.
 * Returns the process exit code (0 or 1); never throws.
 */
export async function dispatch(funcs: PluginFuncs, info: PluginVersionInfo, about: string, io: SkelIO): Promise<number> {
  let configVersion: string = CURRENT_VERSION;
  try {
    if ((io.env.CNI_COMMAND ?? '') === '' && about !== '') {
      io.stderr.write(`${about}\nCNI protocol versions supported: ${info.supportedVersions.join(', ')}\n`);
      return 0;
    }
    const { command, vars } = readEnv(io);
    if (command === 'VERSION') {
      io.stdout.write(`${JSON.stringify({ ...info, cniVersion: await versionQueried(io) })}\n`);
      return 0;
    }
    const args = await buildCmdArgs(command, vars, io, info);
    configVersion = args.cniVersion;
    switch (command) {
      case 'ADD': {
        const result = await funcs.add(args);
        io.stdout.write(`${JSON.stringify(convertResult(result, args.cniVersion), null, 4)}\n`);
        return 0;
      }
      case 'DEL':
        await funcs.del(args);
        return 0;
      case 'CHECK':
      case 'GC':
      case 'STATUS': {
        const fn = command === 'CHECK' ? funcs.check : command === 'GC' ? funcs.gc : funcs.status;
        if (fn) await fn(args);
        return 0;
      }
    }
  } catch (err) {
    io.stdout.write(`${JSON.stringify(asCniError(err).toJSON(configVersion), null, 4)}\n`);
    return 1;
  }
  return 1;
}

/** Runs `dispatch` against this process's env and stdio and sets the exit code. */
export async function pluginMain(funcs: PluginFuncs, info: PluginVersionInfo, about: string): Promise<void> {
  process.exitCode = await dispatch(funcs, info, about, {
    env: process.env,
    readStdin: async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString('utf8');
    },
    stdout: process.stdout,
    stderr: process.stderr,
  });
}
