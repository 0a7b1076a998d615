// The datapath restart test (test/support/datapathRestartSuite.ts) on dual-stack pods.
import { datapathRestartSuite } from '../support/datapathRestartSuite.js';

datapathRestartSuite('dual', 'dprd');
