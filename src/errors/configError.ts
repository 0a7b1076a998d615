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

/** The IPv6 combinations the eBPF datapath does not carry yet, and what to give instead. */
export const IPV6_NOT_YET = {
  tunnel: 'the eBPF overlay (--routing-mode tunnel) does not carry IPv6 yet: use --routing-mode native, or IPv4 pod CIDRs only',
  masquerade: 'the eBPF datapath does not masquerade IPv6 yet: leave out --ipv6-masquerade (pods\' IPv6 traffic then leaves with the pod\'s address)',
} as const;

/**
 * The start check for an IPv6 pod CIDR (from a flag, or the Node's
 * spec.podCIDRs): the eBPF datapath carries pods' IPv6 natively routed, but
 * not over the overlay yet. The routing datapath's tunnel mode is refused on
 * its own.
 */
export function refuseIpv6PodCidrNotYet(what: string, config: { datapath: string; routingMode?: string | undefined }): void {
  if (config.datapath === 'bpf' && config.routingMode === 'tunnel') throw new ConfigError(ipv6NotYetRefusal(what, 'tunnel'));
}

/**
 * Refuses, at start, an IPv6 pod CIDR with a part of the eBPF datapath that
 * has no IPv6 path yet: its pods would get IPv6 addresses whose traffic that
 * part drops. `what` names the flag (or the Node field) and the CIDR.
 */
export function ipv6NotYetRefusal(what: string, missing: keyof typeof IPV6_NOT_YET): string {
  return `${what}: ${IPV6_NOT_YET[missing]}`;
}
