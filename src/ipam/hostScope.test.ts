import { runAllocatorContract } from './contract.js';
import { embeddedBackend } from './testing/backends.js';
import { hostScopeSubject } from './testing/subjects.js';

runAllocatorContract('host-scope (embedded)', hostScopeSubject(embeddedBackend));
