// The pod device tests (test/support/datapathPodDeviceSuite.ts) on IPv4 pods.
import { datapathPodDeviceSuite } from '../support/datapathPodDeviceSuite.js';

datapathPodDeviceSuite(4, 'dpd');
