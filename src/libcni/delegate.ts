import { type AnyResult, CniError, CniErrorCode, convertResult, decodeResult, decodeVersion, validateAbsolutePath } from '../cni/index.js';
import { type PluginExec, RawExec } from './exec.js';

/**
 * Helpers for a plugin that hands part of its job to another plugin (most often
 * IPAM): the delegate runs with the caller's CNI environment, the verb replaced,
 * and is found in the caller's CNI_PATH.
 */
export interface DelegateContext {
  /** The calling plugin's environment (its CNI_* variables are passed on). */
  env: Readonly<Record<string, string | undefined>>;
  exec?: PluginExec;
}

type DelegateVerb = 'ADD' | 'DEL' | 'CHECK' | 'GC' | 'STATUS';

function pluginDirs(env: DelegateContext['env']): string[] {
  const path = env.CNI_PATH ?? '';
  const dirs = path.split(':').filter((d) => d !== '');
  if (dirs.length === 0) throw new CniError(CniErrorCode.InvalidEnvironmentVariables, 'CNI_PATH is empty: cannot find delegate plugin');
  for (const d of dirs) validateAbsolutePath(d, 'CNI_PATH entry');
  return dirs;
}

async function delegate(verb: DelegateVerb, type: string, netconf: string, ctx: DelegateContext): Promise<string> {
  const exec = ctx.exec ?? new RawExec();
  const path = await exec.findInPath(type, pluginDirs(ctx.env));
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(ctx.env)) if (v !== undefined) env[k] = v;
  env.CNI_COMMAND = verb;
  return exec.exec(path, netconf, env);
}

/** Runs the delegate's ADD and returns its result in the netconf's version. */
export async function delegateAdd(type: string, netconf: string, ctx: DelegateContext): Promise<AnyResult> {
  const version = decodeVersion(netconf);
  const stdout = await delegate('ADD', type, netconf, ctx);
  return convertResult(decodeResult(stdout, version), version);
}

export async function delegateDel(type: string, netconf: string, ctx: DelegateContext): Promise<void> {
  await delegate('DEL', type, netconf, ctx);
}

export async function delegateCheck(type: string, netconf: string, ctx: DelegateContext): Promise<void> {
  await delegate('CHECK', type, netconf, ctx);
}

export async function delegateGc(type: string, netconf: string, ctx: DelegateContext): Promise<void> {
  await delegate('GC', type, netconf, ctx);
}
