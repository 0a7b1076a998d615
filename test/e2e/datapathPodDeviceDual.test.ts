// The pod device tests (test/support/datapathPodDeviceSuite.ts) on dual-stack pods.
import { datapathPodDeviceSuite } from '../support/datapathPodDeviceSuite.js';

datapathPodDeviceSuite('dual', 'dpdd');
