import { runAllocatorContract } from './contract.js';
import { embeddedBackend } from './testing/backends.js';
import { clusterPoolSubject } from './testing/subjects.js';

runAllocatorContract('cluster-pool (embedded)', clusterPoolSubject(embeddedBackend));
