/**
 * Public API of src/endpoint: the endpoint model and its state dir, and the
 * EndpointManager that owns every endpoint's lifecycle and regenerations.
 * The agent imports only from here.
 */
export { ENDPOINT_STATES, EndpointSchema, EndpointAddressSchema, type Endpoint, type EndpointState, type EndpointAddress } from './endpoint.js';
export { EndpointStore, QUARANTINE_DIR, type LoadResult, type QuarantinedRecord, type QuarantineHolds, type RestoreProblem } from './endpointStore.js';
export { EndpointError, EndpointErrorCode, isEndpointError } from './errors.js';
export { endpointOwner } from './identityBinder.js';
export {
  EndpointManager,
  podAddress,
  type AddressClaim,
  type AddressLease,
  type AdoptedEndpoint,
  type EndpointManagerOptions,
  type EndpointStateChange,
  type EndpointStateListener,
  type EndpointStatus,
  type NewEndpoint,
  type RestoreHooks,
  type RestoreReport,
} from './manager.js';
export { PolicyRevisions, type EndpointNotReady, type PolicyChange, type PolicyChangeListener, type EndpointPolicySnapshot } from './policyRevisions.js';
export { RegenerationQueue } from './regenerationQueue.js';
export { ENDPOINT_REF, MAX_ENDPOINT_ID } from './registry.js';
export { StepTimer } from './stepTimer.js';
export { patchedLabels, type LabelPatch } from './labelPatch.js';
