// The datapath contract against the Linux datapath. Not a *.test file: it
// programs the namespace it runs in, so linuxContract.test.ts runs it in a
// throw-away node namespace, never in the host's.
import { runDatapathContract } from './contract.js';
import { linuxSubject } from './linuxSubject.js';

runDatapathContract('linux', linuxSubject);
