import { embeddedStore } from './testing/cluster.js';
import { runAllocatorSuite } from './testing/allocatorSuite.js';

runAllocatorSuite('embedded', embeddedStore);
