import type { FastifyReply, FastifyRequest } from 'fastify';
import { AgentError } from '../errors.js';
import { CNI_EXIT_CODE_HEADER, type CniRequest, type CniResponse, SUPPORTED_CNI_VERSIONS } from '../types.js';
import { CniError, CniErrorCode } from '../../cni/errors.js';
import { dispatch, type PluginFuncs } from '../../cni/skel.js';
import { pluginVersionInfo } from '../../cni/version.js';
import type { Logger } from '../../logging/logger.js';

// The agent's side of tendril-cni. The native relay (src/plugin/native) has
// no CNI logic: it sends the runtime's env and stdin here, prints the body of
// the answer verbatim and exits with the code in CNI_EXIT_CODE_HEADER. So the
// whole plugin protocol runs here, through the same skel a plugin would run:
// required env per verb, name checks, cniVersion reconciliation, which verbs a
// version allows, prevResult parsing, and the result converted to the
// config's version.

/** What the CNI route needs of the agent. */
export interface CniHandler {
  handle(req: CniRequest): Promise<CniResponse>;
}

/** What tendril-cni prints on stdout and the code it exits with. */
export interface CniOutput {
  exitCode: number;
  output: string;
}

const VERSION_INFO = pluginVersionInfo(SUPPORTED_CNI_VERSIONS);

/** The CniRequest as the environment a plugin would have been given. */
function pluginEnv(req: CniRequest): Record<string, string | undefined> {
  return {
    CNI_COMMAND: req.command,
    CNI_CONTAINERID: req.containerId,
    CNI_NETNS: req.netns,
    CNI_IFNAME: req.ifName,
    CNI_ARGS: req.args,
    CNI_PATH: req.path,
  };
}

/** Runs one relayed CNI call as tendril-cni would have: never throws, answers the bytes to print. */
export async function runCniCall(handler: CniHandler, req: CniRequest, log: Logger): Promise<CniOutput> {
  const call = async (): Promise<CniResponse> => {
    try {
      return await handler.handle(req);
    } catch (err) {
      const internal = !(err instanceof AgentError) || err.httpStatus >= 500;
      if (internal) log.error({ err, command: req.command, containerId: req.containerId }, 'CNI call failed');
      // Anything but an AgentError becomes code 999 in dispatch.
      throw err instanceof AgentError ? new CniError(err.cniCode, err.message, err.details) : err;
    }
  };
  const funcs: PluginFuncs = {
    add: async () => {
      const { result } = await call();
      if (!result) throw new CniError(CniErrorCode.Internal, 'the agent produced no result for ADD');
      return result;
    },
    del: async () => {
      await call();
    },
    check: async () => {
      await call();
    },
    gc: async () => {
      await call();
    },
    status: async () => {
      await call();
    },
  };
  let output = '';
  const exitCode = await dispatch(funcs, VERSION_INFO, '', {
    env: pluginEnv(req),
    readStdin: async () => req.config,
    stdout: { write: (s: string) => (output += s) },
    // Only the "about" text goes to stderr, and the relay answers that itself.
    stderr: { write: () => undefined },
  });
  return { exitCode, output };
}

/** POST /v1/cni: 200 with tendril-cni's stdout as the body and its exit code in a header. */
export function cniRoute(handler: CniHandler, log: Logger) {
  return async (req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> => {
    const { exitCode, output } = await runCniCall(handler, req.body as CniRequest, log);
    reply.status(200).header(CNI_EXIT_CODE_HEADER, String(exitCode));
    if (output !== '') reply.type('application/json; charset=utf-8');
    return reply.send(output);
  };
}
