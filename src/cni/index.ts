// The CNI specification, plugin side: what other subsystems import.
export * from './cniArgs.js';
export * from './errors.js';
export * from './ip.js';
export * from './names.js';
export * from './netconf.js';
export * from './result.js';
export * from './skel.js';
export * from './types.js';
export * from './version.js';
