import { CodedError } from './codedError.js';

/*
 * The agent's configuration errors, here rather than in src/agent so the
 * subsystems that finish the configuration (src/k8s: the Node's pod CIDRs
 * and addresses) raise the same error without importing the agent.
 */

export const ConfigErrorCode = {
  /** A flag or file key has a bad value, or the values do not fit together. */
  INVALID: 'CONFIG_INVALID',
  /** The config file cannot be read. */
  FILE_UNREADABLE: 'CONFIG_FILE_UNREADABLE',
  /** The config file is not a YAML mapping. */
  FILE_MALFORMED: 'CONFIG_FILE_MALFORMED',
} as const;
export type ConfigErrorCode = (typeof ConfigErrorCode)[keyof typeof ConfigErrorCode];

export class ConfigError extends CodedError<ConfigErrorCode> {
  constructor(message: string, code: ConfigErrorCode = ConfigErrorCode.INVALID, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}
