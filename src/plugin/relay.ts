import { enqueueDeletion } from '../api/deletionQueue.js';
import type { CniRequest, CniVerb } from '../api/types.js';
import { AgentClient, AgentResponseError, AgentUnreachableError } from '../client/agentClient.js';
// Module-by-module imports, not the cni barrel: the plugin must not load schema code (start-up time).
import { CniError, CniErrorCode } from '../cni/errors.js';
import type { CmdArgs, PluginFuncs } from '../cni/skel.js';
import type { AnyResult } from '../cni/types.js';
import { resolveSocketPath } from './socketPath.js';

function toRequest(command: CniVerb, args: CmdArgs): CniRequest {
  return { command, containerId: args.containerId, netns: args.netns, ifName: args.ifName, args: args.args, path: args.path, config: args.stdinData };
}

/** What the plugin does when the agent cannot be reached, per verb. */
function unreachable(command: CniVerb, err: AgentUnreachableError): CniError {
  if (command === 'STATUS') return new CniError(CniErrorCode.PluginNotAvailable, 'tendril agent is not running', err.message);
  return new CniError(CniErrorCode.TryAgainLater, 'tendril agent is unreachable; try again later', err.message);
}

async function relay(command: CniVerb, args: CmdArgs, env: Readonly<Record<string, string | undefined>>): Promise<AnyResult | undefined> {
  const socketPath = resolveSocketPath(args.conf, env);
  const client = new AgentClient({ socketPath });
  try {
    const res = await client.cni(toRequest(command, args));
    return res.result;
  } catch (err) {
    if (err instanceof AgentUnreachableError) {
      if (command === 'DEL') {
        // DEL must not fail because the agent is down: it is queued and drained on the agent's next start.
        await enqueueDeletion(socketPath, toRequest('DEL', args)).catch((qerr: Error) => {
          throw new CniError(CniErrorCode.IOFailure, 'agent unreachable and the deletion could not be queued', qerr.message);
        });
        return undefined;
      }
      throw unreachable(command, err);
    }
    if (err instanceof AgentResponseError) throw new CniError(err.body.cniCode, err.body.message, err.body.details ?? '');
    throw new CniError(CniErrorCode.IOFailure, 'talking to the tendril agent failed', (err as Error).message);
  }
}

/** tendril-cni's verbs: each relays to the agent, which does the work. */
export function relayFuncs(env: Readonly<Record<string, string | undefined>>): PluginFuncs {
  return {
    add: async (args) => {
      const result = await relay('ADD', args, env);
      if (!result) throw new CniError(CniErrorCode.Internal, 'agent returned no result for ADD');
      return result;
    },
    del: async (args) => {
      await relay('DEL', args, env);
    },
    check: async (args) => {
      await relay('CHECK', args, env);
    },
    gc: async (args) => {
      await relay('GC', args, env);
    },
    status: async (args) => {
      await relay('STATUS', args, env);
    },
  };
}
