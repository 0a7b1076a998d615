// The datapath tendril policy truth table (test/support/datapathTendrilPolicySuite.ts) on IPv4 pods.
import { datapathTendrilPolicySuite } from '../support/datapathTendrilPolicySuite.js';

datapathTendrilPolicySuite(4, 'dpt');
