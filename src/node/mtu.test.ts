import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TUNNEL_OVERHEAD } from '../datapath/bpf/constants.js';
import { NodeConfigError, NodeErrorCode } from './errors.js';
import { resolvePodMtu } from './mtu.js';

const configError = (pattern: RegExp) => (e: unknown) => e instanceof NodeConfigError && e.code === NodeErrorCode.CONFIG && pattern.test(e.message);

describe('pod MTU', () => {
  it('is the underlay MTU minus the VXLAN overhead in tunnel mode, the underlay MTU in native mode', () => {
    assert.equal(TUNNEL_OVERHEAD, 50);
    assert.equal(resolvePodMtu({ mode: 'tunnel', underlayMtu: 1500 }), 1450);
    assert.equal(resolvePodMtu({ mode: 'tunnel', underlayMtu: 9000 }), 8950);
    assert.equal(resolvePodMtu({ mode: 'native', underlayMtu: 1500 }), 1500);
    assert.equal(resolvePodMtu({ mode: 'native', underlayMtu: 9000 }), 9000);
  });

  it('takes a configured MTU up to the limit and refuses one above it', () => {
    assert.equal(resolvePodMtu({ mode: 'tunnel', underlayMtu: 1500, configured: 1400 }), 1400);
    assert.equal(resolvePodMtu({ mode: 'tunnel', underlayMtu: 1500, configured: 1450 }), 1450);
    assert.throws(() => resolvePodMtu({ mode: 'tunnel', underlayMtu: 1500, configured: 1451 }), configError(/1451.*1500.*50.*1450/));
    assert.throws(() => resolvePodMtu({ mode: 'native', underlayMtu: 1500, configured: 1501 }), configError(/1501/));
    assert.equal(resolvePodMtu({ mode: 'native', underlayMtu: 1500, configured: 1500 }), 1500);
  });

  it('without a detected underlay: the configured MTU as given, else Ethernet minus the overhead', () => {
    assert.equal(resolvePodMtu({ mode: 'tunnel' }), 1450);
    assert.equal(resolvePodMtu({ mode: 'native' }), 1500);
    assert.equal(resolvePodMtu({ mode: 'tunnel', configured: 8950 }), 8950);
  });

  it('refuses values no pod could use', () => {
    assert.throws(() => resolvePodMtu({ mode: 'tunnel', configured: 100 }), configError(/576/));
    assert.throws(() => resolvePodMtu({ mode: 'tunnel', configured: 1400.5 }), configError(/integer/));
    assert.throws(() => resolvePodMtu({ mode: 'tunnel', underlayMtu: 600 }), configError(/underlay MTU 600/));
    assert.equal(resolvePodMtu({ mode: 'native', underlayMtu: 600 }), 600);
  });
});
