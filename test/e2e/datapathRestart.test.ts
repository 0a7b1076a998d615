// The datapath restart test (test/support/datapathRestartSuite.ts) on IPv4 pods.
import { datapathRestartSuite } from '../support/datapathRestartSuite.js';

datapathRestartSuite(4, 'dpr');
