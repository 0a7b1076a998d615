import { runAllocatorContract } from './contract.js';
import { embeddedBackend } from './testing/backends.js';
import { delegatedSubject } from './testing/subjects.js';

runAllocatorContract('delegated host-local (embedded)', delegatedSubject(embeddedBackend));
