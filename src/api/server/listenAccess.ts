/**
 * Who may read a TCP listener that serves flows (the agent's
 * --flows-listen-addr, `tendril relay`): TLS with a given certificate
 * (client certificates checked against a CA for mTLS) and/or a shared bearer
 * token. The socket API is root's by its file mode; a TCP port has no such
 * guard, so an address other hosts can reach must have one of these, and a
 * listener is refused at start when it has neither.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { isIP } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { ConfigError } from '../../errors/configError.js';
import { fileErrorReason } from '../../errors/fileError.js';
import { parseServeAddress, type ServeAddress } from '../../metrics/metricsServer.js';
import { AgentError } from '../errors.js';

/** The files a listener's access is read from (flags or config keys). */
export interface ListenAccessFiles {
  tokenFile?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsClientCa?: string;
}

/** The access a listener enforces, read from its files. */
export interface ListenAccess {
  /** The bearer token every request must carry (`Authorization: Bearer <token>`). */
  token?: string;
  tls?: { cert: Buffer; key: Buffer; clientCa?: Buffer };
}

/** The flag names of one listener's options, for messages (`--flows-` for the agent, `--` for the relay). */
export interface ListenFlags {
  listen: string;
  tokenFile: string;
  tlsCert: string;
  tlsKey: string;
  tlsClientCa: string;
}

export function listenFlags(prefix: string): ListenFlags {
  return { listen: `${prefix}listen-addr`, tokenFile: `${prefix}token-file`, tlsCert: `${prefix}tls-cert`, tlsKey: `${prefix}tls-key`, tlsClientCa: `${prefix}tls-client-ca` };
}

/** Whether a listen host reaches only this host: a loopback address or `localhost`. */
export function isLoopbackHost(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  if (isIP(host) === 6) return host === '::1' || /^::ffff:127\./i.test(host);
  return false;
}

/**
 * Checks a listener's options together, before anything is read or bound:
 * the address parses, certificate and key come together, a client CA needs
 * TLS, and an address other hosts can reach has TLS or a token. Throws
 * ConfigError naming the flags.
 */
export function checkListenOptions(addr: string, files: ListenAccessFiles, flags: ListenFlags): ServeAddress {
  let where: ServeAddress;
  try {
    where = parseServeAddress(addr, flags.listen);
  } catch (err) {
    throw new ConfigError((err as Error).message, undefined, { cause: err });
  }
  if ((files.tlsCert === undefined) !== (files.tlsKey === undefined)) throw new ConfigError(`${flags.tlsCert} and ${flags.tlsKey} go together: give both or neither`);
  if (files.tlsClientCa !== undefined && files.tlsCert === undefined) throw new ConfigError(`${flags.tlsClientCa} checks client certificates in TLS: give ${flags.tlsCert} and ${flags.tlsKey} too`);
  const protectedBy = files.tlsCert !== undefined || files.tokenFile !== undefined;
  if (!protectedBy && !isLoopbackHost(where.host)) {
    throw new ConfigError(
      `${flags.listen} ${addr} can be reached from other hosts, and the flows show every connection of the node's pods: give ${flags.tokenFile} and/or ${flags.tlsCert}/${flags.tlsKey}, or listen on a loopback address (127.0.0.1:<port>)`,
    );
  }
  return where;
}

function readAccessFile(flag: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new ConfigError(`${flag}: cannot read ${path}: ${fileErrorReason(err)}`, undefined, { cause: err });
  }
}

/** Reads the token and TLS files; an unreadable file or an empty token is a ConfigError naming the flag. */
export function readListenAccess(files: ListenAccessFiles, flags: ListenFlags): ListenAccess {
  const access: ListenAccess = {};
  if (files.tokenFile !== undefined) {
    const token = readAccessFile(flags.tokenFile, files.tokenFile).toString('utf8').trim();
    if (token === '' || /\s/.test(token)) throw new ConfigError(`${flags.tokenFile}: ${files.tokenFile} must hold one token (no whitespace inside), and holds ${token === '' ? 'none' : 'whitespace'}`);
    access.token = token;
  }
  if (files.tlsCert !== undefined && files.tlsKey !== undefined) {
    access.tls = {
      cert: readAccessFile(flags.tlsCert, files.tlsCert),
      key: readAccessFile(flags.tlsKey, files.tlsKey),
      ...(files.tlsClientCa !== undefined ? { clientCa: readAccessFile(flags.tlsClientCa, files.tlsClientCa) } : {}),
    };
  }
  return access;
}

/** The HTTP server a listener's fastify instance serves on: HTTPS with the access's certificate (mTLS with its client CA), else plain HTTP. */
export function listenServerFactory(access: ListenAccess) {
  return (handler: (req: IncomingMessage, res: ServerResponse) => void, http: { requestTimeout: number; headersTimeout: number; connectionsCheckingInterval: number }): HttpServer => {
    const tls = access.tls;
    if (!tls) return createHttpServer(http, handler);
    const mtls = tls.clientCa !== undefined ? { ca: tls.clientCa, requestCert: true, rejectUnauthorized: true } : {};
    // An https.Server is an http.Server to fastify (same request events, same timeouts).
    return createHttpsServer({ ...http, cert: tls.cert, key: tls.key, minVersion: 'TLSv1.2', ...mtls }, handler) as unknown as HttpServer;
  };
}

const digest = (text: string): Buffer => createHash('sha256').update(text, 'utf8').digest();

/** Whether a request's Authorization header carries the token, compared in constant time (digests of equal length). */
export function bearerTokenMatches(header: string | undefined, token: string): boolean {
  const m = /^Bearer +(\S+) *$/i.exec(header ?? '');
  const given = m?.[1] ?? '';
  // Always compare, also without a header: the time taken says nothing about the token.
  const same = timingSafeEqual(digest(given), digest(token));
  return same && m !== null;
}

/**
 * Refuses every request without the token with 401 UNAUTHORIZED, before
 * routing does anything with it; but GETs of `isPublic` paths (a web UI's
 * page and assets, which hold no data: the page asks for the token itself).
 */
export function requireBearerToken(app: FastifyInstance, token: string, isPublic: (path: string) => boolean = () => false): void {
  app.addHook('onRequest', async (req, reply) => {
    if (bearerTokenMatches(req.headers.authorization, token)) return;
    if ((req.method === 'GET' || req.method === 'HEAD') && isPublic(req.url.split('?')[0]!)) return;
    const e = new AgentError('UNAUTHORIZED', req.headers.authorization === undefined ? 'this listener wants a bearer token (Authorization: Bearer <token>)' : 'the bearer token is not the one this listener wants');
    await reply.status(401).header('www-authenticate', 'Bearer').send(e.toResponse());
  });
}

/** Listens on a parsed address; answers the address as bound (the port chosen for :0). A failure is a ConfigError naming the flag. */
export async function listenAt(app: FastifyInstance, where: ServeAddress, flag: string): Promise<ServeAddress> {
  try {
    await app.listen({ port: where.port, host: where.host === '' ? '::' : where.host });
  } catch (err) {
    throw new ConfigError(`${flag}: cannot listen on ${where.host === '' ? '' : where.host.includes(':') ? `[${where.host}]` : where.host}:${where.port}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, undefined, { cause: err });
  }
  const bound = app.server.address();
  return { host: where.host, port: bound !== null && typeof bound === 'object' ? bound.port : where.port };
}

/** `host:port` for a URL or a registry record (IPv6 in brackets). */
export function hostPort(host: string, port: number): string {
  return `${host.includes(':') ? `[${host}]` : host}:${port}`;
}
