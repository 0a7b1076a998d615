// The datapath tendril policy truth table (test/support/datapathTendrilPolicySuite.ts) on dual-stack pods.
import { datapathTendrilPolicySuite } from '../support/datapathTendrilPolicySuite.js';

datapathTendrilPolicySuite('dual', 'dptd');
