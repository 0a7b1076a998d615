/**
 * Public API of src/policy: rules in (YAML/JSON NetworkPolicy and tendril
 * policies), per-endpoint map state out, incrementally, with explanations.
 * The agent and CLI import only from here.
 */
export {
  PolicyErrorCode,
  PolicyError,
  PolicyValidationError,
  PolicyParseError,
  PolicyNotFoundError,
  UnknownEndpointError,
  UnknownIdentityError,
  PolicyMapOverflowError,
  PolicyArgumentError,
  PolicyStoreError,
  isPolicyError,
  formatIssue,
  type PolicyIssue,
} from './errors.js';
export {
  ReservedIdentity,
  MIN_ALLOCATED_IDENTITY,
  MIN_LOCAL_CIDR_IDENTITY,
  Proto,
  PORT_PROTOCOLS,
  DIRECTIONS,
  protocolNumber,
  protocolName,
  type Identity,
  type IdentityView,
  type CidrIdentitySource,
  type Direction,
  type ProtocolName,
  type Verdict,
  type EnforcementMode,
  type NamedPort,
  type EndpointInfo,
} from './types.js';
export {
  PolicyEngine,
  type PolicyEngineReader,
  DEFAULT_MAX_ENTRIES_PER_ENDPOINT,
  type PolicyEngineOptions,
  type EndpointRegeneration,
  type PolicyUpdateResult,
  type PolicyImportResult,
  type PolicyDeleteResult,
  type EndpointPolicy,
  type StagedView,
  type TracePeer,
  type MapLookup,
} from './engine.js';
export { PolicyRepository, type PolicyFilter, type RepositoryChange } from './repository.js';
export { SelectorCache, type CachedSelector, type SelectionChange } from './selectorCache.js';
export { MapState, mapKeyString, formatMapKey, type MapKey, type MapEntry } from './mapState.js';
export { portRangeToPrefixes, portRangeOf, formatPortKey, parsePortProtocol, type PortKey } from './ports.js';
export { ciliumKeyToTendril, parsePolicyText, parsePolicyDocuments, NAMESPACE_LABEL_PREFIX, SERVICE_ACCOUNT_LABEL } from './ruleParser.js';
export { PolicyKind, formatPolicyName, type Policy, type PolicyName, type Rule, type RuleOrigin, type PeerRule, type PortRule } from './rule.js';
export { ENTITIES, type Entity, type IdentitySelector } from './selector.js';
export { evaluateDirection, traceFlow, formatTrace, type DirectionDecision, type DecisionReason, type TraceResult, type EvaluationContext } from './evaluate.js';
export { LocalIdentityTable } from './identities.js';
export { refuseNamedPorts } from './namedPortRefusal.js';
export { STAGED_ANNOTATION, withStaged } from './staged.js';
