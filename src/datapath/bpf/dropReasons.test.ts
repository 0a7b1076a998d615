/**
 * Drop codes: a reason Cilium has too carries Cilium's number, every other
 * reason one of tendril's own range, and no number means two things.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DROP_OWN_RANGE, DropReason, dropReasonName, MetricsReason } from './constants.js';

/**
 * Cilium's numbers for the DROP_* that DropReason names (Cilium's
 * bpf/lib/drop_reasons.h, upstream; facts for comparison only). A reason
 * naming another DROP_* needs its number here.
 */
const CILIUM_DROP_CODES: Record<string, number> = {
  DROP_INVALID_SIP: -132,
  DROP_POLICY: -133,
  DROP_INVALID: -134,
  DROP_CT_INVALID_HDR: -135,
  DROP_UNKNOWN_L3: -139,
  DROP_WRITE_ERROR: -141,
  DROP_NO_TUNNEL_KEY: -147,
  DROP_UNKNOWN_TARGET: -150,
  DROP_UNROUTABLE: -151,
  DROP_CT_CREATE_FAILED: -155,
  DROP_INVALID_EXTHDR: -156,
  DROP_NO_SERVICE: -158,
  DROP_NO_CONFIG: -165,
  DROP_NAT_NO_MAPPING: -167,
  DROP_NAT_UNSUPP_PROTO: -168,
  DROP_NO_FIB: -169,
  DROP_IS_CLUSTER_IP: -174,
  DROP_FRAG_NOT_FOUND: -175,
  DROP_FORBIDDEN_ICMP6: -176,
  DROP_NOT_IN_SRC_RANGE: -177,
  DROP_POLICY_DENY: -181,
  DROP_TTL_EXCEEDED: -196,
};
/** The numbers Cilium assigns (DROP_UNUSED1 at -130 up to the newest, with room to grow). */
const CILIUM_RANGE = { first: 130, last: 229 };

test('a drop reason Cilium has carries Cilium\'s number; every other one is in tendril\'s own range', () => {
  for (const [name, r] of Object.entries(DropReason) as Array<[string, { code: number; cilium?: string }]>) {
    const n = -r.code;
    if (r.cilium !== undefined) {
      assert.ok(r.cilium in CILIUM_DROP_CODES, `${name}: Cilium's number for ${r.cilium} is not in this test's table`);
      assert.equal(r.code, CILIUM_DROP_CODES[r.cilium], `${name} is Cilium's ${r.cilium}`);
    } else {
      assert.ok(n >= DROP_OWN_RANGE.first && n <= DROP_OWN_RANGE.last, `${name} (${r.code}) names no Cilium reason, so its code is tendril's own: ${DROP_OWN_RANGE.first}..${DROP_OWN_RANGE.last}`);
    }
  }
  assert.ok(DROP_OWN_RANGE.first > CILIUM_RANGE.last && DROP_OWN_RANGE.last < MetricsReason.EVENTS_LOST);
});

test('no two drop reasons share a code, and each code names its reason back', () => {
  const codes = Object.values(DropReason).map((r) => r.code);
  assert.equal(new Set(codes).size, codes.length);
  for (const [name, r] of Object.entries(DropReason)) {
    assert.equal(dropReasonName(r.code), name);
    assert.equal(dropReasonName(-r.code), name);
  }
});
