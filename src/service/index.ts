/** Services: validation, backend IDs, Maglev tables and the manager the agent's API uses. */
export { ServiceError, ServiceErrorCode, isServiceError } from './errors.js';
export type * from './types.js';
export { BackendRegistry, MAX_BACKEND_ID } from './backendRegistry.js';
export { buildMaglevTable, isPrime, isValidMaglevTableSize, MAGLEV_DEFAULT_TABLE_SIZE, MAGLEV_MAX_TABLE_SIZE, MAGLEV_MIN_TABLE_SIZE } from './maglev.js';
export { ServiceManager, type ServiceManagerOptions, type ServiceRestoreReport } from './manager.js';
export { renderService, selectableBackends } from './render.js';
export { ServiceStore, type StoredService } from './serviceStore.js';
export { validateServiceSpec, type NormalizedService } from './validate.js';
