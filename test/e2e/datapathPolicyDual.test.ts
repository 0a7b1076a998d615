// The datapath NetworkPolicy truth table (test/support/datapathPolicySuite.ts) on dual-stack pods.
import { datapathPolicySuite } from '../support/datapathPolicySuite.js';

datapathPolicySuite('dual', 'dpnd');
