import { KVSTORE_OPTION_KEYS } from '../optionKeys.js';
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import type { Logger } from '../../logging/logger.js';
import { parseDurationMs } from '../duration.js';
import { InvalidOptionError } from '../errors.js';
import { fileErrorReason } from '../../errors/fileError.js';

export interface EtcdOptions {
  /** gRPC endpoints, e.g. http://127.0.0.1:2379 or https://etcd-0:2379. */
  endpoints: string[];
  tls?: { ca: Buffer; cert?: Buffer; key?: Buffer };
  auth?: { username: string; password: string };
  /** Deadline of one unary call; a dead connection is noticed within it. */
  callTimeoutMs: number;
  /** How long an operation keeps retrying while etcd is unreachable. */
  retryTimeoutMs: number;
  logger: Logger;
}

/** `--kvstore-opt` keys the etcd backend understands (see ../optionKeys.ts). */
export const ETCD_OPTION_KEYS = KVSTORE_OPTION_KEYS.etcd;

const ConfigFile = z
  .object({
    endpoints: z.array(z.string().min(1)).min(1).optional(),
    'trusted-ca-file': z.string().min(1).optional(),
    'cert-file': z.string().min(1).optional(),
    'key-file': z.string().min(1).optional(),
    username: z.string().min(1).optional(),
    password: z.string().optional(),
  })
  .strict();

type ConfigFile = z.infer<typeof ConfigFile>;

function readConfigFile(path: string): ConfigFile {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new InvalidOptionError(`etcd.config: cannot read ${path}: ${fileErrorReason(err)}`);
  }
  const parsed = ConfigFile.safeParse(parseYaml(text));
  if (!parsed.success) {
    throw new InvalidOptionError(`etcd.config: ${path}: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  }
  return parsed.data;
}

function readPem(option: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new InvalidOptionError(`${option}: cannot read ${path}: ${fileErrorReason(err)}`);
  }
}

function checkEndpoint(e: string): string {
  let url: URL;
  try {
    url = new URL(e);
  } catch {
    throw new InvalidOptionError(`etcd.endpoints: "${e}" is not a URL like http://127.0.0.1:2379`);
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.port === '' || url.pathname !== '/') {
    throw new InvalidOptionError(`etcd.endpoints: "${e}" must be http(s)://host:port`);
  }
  return `${url.protocol}//${url.host}`;
}

export function parseEtcdOptions(opts: Record<string, string>, logger: Logger): EtcdOptions {
  const file: ConfigFile = opts['etcd.config'] === undefined ? {} : readConfigFile(opts['etcd.config']);
  const endpointsText = opts['etcd.endpoints'];
  const endpoints = (endpointsText !== undefined ? endpointsText.split(',').map((s) => s.trim()).filter((s) => s !== '') : file.endpoints) ?? [];
  if (endpoints.length === 0) {
    throw new InvalidOptionError('etcd needs endpoints: --kvstore-opt etcd.endpoints=http://host:2379[,…] or etcd.config=<file>');
  }
  const caFile = opts['etcd.trustedCAFile'] ?? file['trusted-ca-file'];
  const certFile = opts['etcd.certFile'] ?? file['cert-file'];
  const keyFile = opts['etcd.keyFile'] ?? file['key-file'];
  if ((certFile === undefined) !== (keyFile === undefined)) {
    throw new InvalidOptionError('etcd.certFile and etcd.keyFile must be given together');
  }
  if (certFile !== undefined && caFile === undefined) {
    throw new InvalidOptionError('a client certificate needs etcd.trustedCAFile as well');
  }
  const username = opts['etcd.username'] ?? file.username;
  const password = opts['etcd.password'] ?? file.password;
  if ((username === undefined) !== (password === undefined)) {
    throw new InvalidOptionError('etcd.username and etcd.password must be given together');
  }
  const result: EtcdOptions = {
    endpoints: endpoints.map(checkEndpoint),
    callTimeoutMs: opts['etcd.callTimeout'] === undefined ? 5000 : parseDurationMs('etcd.callTimeout', opts['etcd.callTimeout']),
    retryTimeoutMs: opts['etcd.retryTimeout'] === undefined ? 10_000 : parseDurationMs('etcd.retryTimeout', opts['etcd.retryTimeout']),
    logger,
  };
  if (caFile !== undefined) {
    result.tls = { ca: readPem('etcd.trustedCAFile', caFile) };
    if (certFile !== undefined && keyFile !== undefined) {
      result.tls.cert = readPem('etcd.certFile', certFile);
      result.tls.key = readPem('etcd.keyFile', keyFile);
    }
  }
  if (username !== undefined && password !== undefined) result.auth = { username, password };
  return result;
}
