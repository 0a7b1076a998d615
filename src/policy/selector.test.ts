// The selectors' view of the world identities: a /0 admits its own family's
// world only, the `world` entity admits both.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { reservedIdentity, ReservedIdentity } from '../identity/index.js';
import { parsePrefix } from '../netip/index.js';
import { CidrIdentitySelector, EntityIdentitySelector } from './selector.js';

const labelsOf = (id: number) => reservedIdentity(id)!.labels;

describe('CidrIdentitySelector on the world identities', () => {
  it('0.0.0.0/0 admits the IPv4 world (world, world-ipv4), never world-ipv6', () => {
    const v4 = new CidrIdentitySelector(parsePrefix('0.0.0.0/0'));
    assert.equal(v4.matches(labelsOf(ReservedIdentity.World)), true);
    assert.equal(v4.matches(labelsOf(ReservedIdentity.WorldIpv4)), true);
    assert.equal(v4.matches(labelsOf(ReservedIdentity.WorldIpv6)), false);
  });

  it('::/0 admits world-ipv6 only: the family-free world is what IPv4 addresses outside the ipcache get', () => {
    const v6 = new CidrIdentitySelector(parsePrefix('::/0'));
    assert.equal(v6.matches(labelsOf(ReservedIdentity.WorldIpv6)), true);
    assert.equal(v6.matches(labelsOf(ReservedIdentity.World)), false);
    assert.equal(v6.matches(labelsOf(ReservedIdentity.WorldIpv4)), false);
  });

  it('a narrower prefix admits no world identity, and no selector admits the node', () => {
    for (const p of ['10.0.0.0/8', 'fd00::/8']) {
      const s = new CidrIdentitySelector(parsePrefix(p));
      for (const id of [ReservedIdentity.World, ReservedIdentity.WorldIpv4, ReservedIdentity.WorldIpv6, ReservedIdentity.Host]) assert.equal(s.matches(labelsOf(id)), false, `${p} / ${id}`);
    }
    assert.equal(new CidrIdentitySelector(parsePrefix('::/0')).matches(labelsOf(ReservedIdentity.Host)), false);
  });

  it('the world entity admits every world identity, whatever the family', () => {
    const world = new EntityIdentitySelector('world');
    for (const id of [ReservedIdentity.World, ReservedIdentity.WorldIpv4, ReservedIdentity.WorldIpv6]) assert.equal(world.matches(labelsOf(id)), true);
    assert.equal(world.matches(labelsOf(ReservedIdentity.Host)), false);
  });
});
