import { CniError } from '../cni/index.js';
import { isDatapathError } from '../datapath/types.js';
import { EndpointErrorCode, isEndpointError } from '../endpoint/index.js';
import { IdentityError, IdentityErrorCode } from '../identity/index.js';
import { IpamError, IpamErrorCode } from '../ipam/index.js';
import { LabelError } from '../labels/index.js';
import { isPolicyError, PolicyErrorCode, PolicyValidationError } from '../policy/index.js';
import { AgentError, agentCodeForCni } from './errors.js';

/*
 * The API's one mapping of the subsystems' typed errors to its error codes
 * (errors.ts has the codes' HTTP status and CNI code): every route and the
 * CNI verbs answer through it, so one subsystem error has one API answer.
 */

function fromCniError(err: CniError): AgentError {
  return new AgentError(agentCodeForCni(err.code), err.msg, err.details, err.code);
}

function fromIpamError(err: IpamError): AgentError {
  switch (err.code) {
    case IpamErrorCode.POOL_EXHAUSTED:
    case IpamErrorCode.NO_FREE_BLOCK:
      return new AgentError('IPAM_EXHAUSTED', err.message);
    case IpamErrorCode.INVALID_CIDR:
    case IpamErrorCode.INVALID_CONFIG:
    case IpamErrorCode.INVALID_ARGUMENT:
    case IpamErrorCode.UNKNOWN_POOL:
    case IpamErrorCode.FAMILY_UNAVAILABLE:
      return new AgentError('INVALID_REQUEST', err.message);
    case IpamErrorCode.CONFLICT:
      return new AgentError('TRY_AGAIN', err.message);
    case IpamErrorCode.IP_IN_USE:
      return new AgentError('CONFLICT', err.message);
    case IpamErrorCode.NOT_STARTED:
      return new AgentError('NOT_READY', err.message);
    case IpamErrorCode.DELEGATE_FAILED: {
      // Pass the delegated plugin's own CNI code through to the runtime.
      const cause = err.cause;
      return cause instanceof CniError ? new AgentError('IPAM_FAILED', err.message, cause.details, cause.code) : new AgentError('IPAM_FAILED', err.message);
    }
  }
}

/** Turns subsystem errors into API errors with a stable code. */
export function toAgentError(err: unknown): AgentError {
  if (err instanceof AgentError) return err;
  if (err instanceof CniError) return fromCniError(err);
  if (err instanceof IpamError) return fromIpamError(err);
  if (err instanceof LabelError) return new AgentError('INVALID_REQUEST', err.message);
  if (isEndpointError(err)) {
    switch (err.code) {
      case EndpointErrorCode.NOT_FOUND:
        return new AgentError('NOT_FOUND', err.message);
      case EndpointErrorCode.CONFLICT:
      case EndpointErrorCode.DISCONNECTING:
        return new AgentError('CONFLICT', err.message);
      case EndpointErrorCode.INVALID_ARGUMENT:
        return new AgentError('INVALID_REQUEST', err.message);
      case EndpointErrorCode.NETNS_REFUSED:
        // The CNI spec has no code for "this is not a pod's namespace"; CNI_NETNS is an environment variable.
        return new AgentError('INVALID_ENVIRONMENT', `CNI_NETNS refused: ${err.message}`);
      case EndpointErrorCode.REGENERATION_FAILED:
        return new AgentError('DATAPATH_FAILED', err.message);
      case EndpointErrorCode.ADDRESSES_LOST:
        // Transient: the node was slower than --ipam-expiration; a retried ADD allocates afresh.
        return new AgentError('TRY_AGAIN', err.message);
    }
  }
  if (isPolicyError(err)) {
    switch (err.code) {
      case PolicyErrorCode.PARSE:
      case PolicyErrorCode.INVALID:
      case PolicyErrorCode.INVALID_ARGUMENT:
        return new AgentError('INVALID_REQUEST', err instanceof PolicyValidationError ? 'invalid policy' : err.message, err instanceof PolicyValidationError ? err.message : '');
      case PolicyErrorCode.NOT_FOUND:
      case PolicyErrorCode.UNKNOWN_ENDPOINT:
      case PolicyErrorCode.UNKNOWN_IDENTITY:
        return new AgentError('NOT_FOUND', err.message);
      case PolicyErrorCode.STORE_FAILED:
        // The kvstore did not take the change (unreachable, refused): nothing changed, a retry may work.
        return new AgentError('TRY_AGAIN', err.message);
      default:
        return new AgentError('INTERNAL', err.message);
    }
  }
  if (err instanceof IdentityError) {
    // Labels or an identity number the caller gave are its fault; trying again would not help.
    if (err.code === IdentityErrorCode.INVALID_LABELS || err.code === IdentityErrorCode.INVALID_ID) return new AgentError('INVALID_REQUEST', err.message);
    return new AgentError('TRY_AGAIN', `identity: ${err.message}`);
  }
  // An interface of the pod's name that is not the attachment's own: CNI_IFNAME is taken in
  // CNI_NETNS, which no retry changes (the reference bridge plugin says "already exists" too).
  if (isDatapathError(err, 'exists')) return new AgentError('INVALID_ENVIRONMENT', err.message);
  // `refused`: the request named something the datapath must not touch (e.g. PUT /endpoint with the node's uplink).
  if (isDatapathError(err, 'refused')) return new AgentError('INVALID_REQUEST', err.message);
  if (isDatapathError(err)) return new AgentError('DATAPATH_FAILED', err.message);
  return new AgentError('INTERNAL', err instanceof Error ? err.message : String(err));
}
