// The datapath restart test (test/support/datapathRestartSuite.ts) on IPv6 pods.
import { datapathRestartSuite } from '../support/datapathRestartSuite.js';

datapathRestartSuite(6, 'dpr6');
