// The pod device tests (test/support/datapathPodDeviceSuite.ts) on IPv6 pods.
import { datapathPodDeviceSuite } from '../support/datapathPodDeviceSuite.js';

datapathPodDeviceSuite(6, 'dpd6');
