// The datapath tendril policy truth table (test/support/datapathTendrilPolicySuite.ts) on IPv6 pods.
import { datapathTendrilPolicySuite } from '../support/datapathTendrilPolicySuite.js';

datapathTendrilPolicySuite(6, 'dpt6');
