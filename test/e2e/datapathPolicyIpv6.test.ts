// The datapath NetworkPolicy truth table (test/support/datapathPolicySuite.ts) on IPv6 pods.
import { datapathPolicySuite } from '../support/datapathPolicySuite.js';

datapathPolicySuite(6, 'dpn6');
