// Moved to src/testing (test support the src tree's own suites use too); named here for the tests under test/.
export * from '../../src/testing/run.js';
