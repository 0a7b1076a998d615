import { embeddedStore } from '../identity/testing/cluster.js';
import { runRegistrySuite } from './testing/registrySuite.js';

runRegistrySuite('embedded', embeddedStore);
