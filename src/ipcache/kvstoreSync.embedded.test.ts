import { embeddedStore } from '../identity/testing/cluster.js';
import { runSyncSuite } from './testing/syncSuite.js';

runSyncSuite('embedded', embeddedStore);
