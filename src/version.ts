import { installedPackage } from './installLayout.js';

/**
 * tendril's version, from the installation's package.json: the one place it
 * is written, so the agent, the CLI and the API agree.
 */
export function tendrilVersion(): string {
  return installedPackage().version;
}
