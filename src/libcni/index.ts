// The runtime side of CNI (what container runtimes do through Go's libcni).
export * from './cache.js';
export * from './conf.js';
export * from './delegate.js';
export * from './exec.js';
export * from './runtime.js';
