import { runAllocatorContract } from './contract.js';
import { embeddedBackend } from './testing/backends.js';
import { blockSubject } from './testing/subjects.js';

runAllocatorContract('block affinity (embedded)', blockSubject(embeddedBackend));
