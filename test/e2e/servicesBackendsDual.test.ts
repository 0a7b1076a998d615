// The backend-change service suite (test/support/servicesBackendsSuite.ts) on dual-stack pods.
import { servicesBackendsSuite } from '../support/servicesBackendsSuite.js';

servicesBackendsSuite('dual', 'svbd');
