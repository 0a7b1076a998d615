// The datapath NetworkPolicy truth table (test/support/datapathPolicySuite.ts) on IPv4 pods.
import { datapathPolicySuite } from '../support/datapathPolicySuite.js';

datapathPolicySuite(4, 'dpn');
