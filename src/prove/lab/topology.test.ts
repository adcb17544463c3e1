import { describe, expect, it } from 'vitest';
import { validateTopology } from './topology.js';

describe('validateTopology', () => {
  it('lists every problem at once, each with its path', () => {
    expect(() => {
      validateTopology({
        nodes: { Host: {}, a: { routes: [{ to: 'default' }, { to: '10.0.0.1/8', via: '::1' }] } },
        links: [
          { a: { node: 'a', iface: 'this-name-is-too-long' }, b: { node: 'zz', iface: 'e' } },
          { a: { node: 'a', iface: 'e0', addresses: ['10.0.0.1'] }, b: { node: 'a', iface: 'e0' } },
        ],
      });
    }).toThrow(
      new RegExp(
        [
          'Cannot build lab: 9 problems in the topology: nodes\\.Host: name must match .*',
          'links\\[0\\]\\.a\\.iface "this-name-is-too-long" must match .*',
          'links\\[0\\]\\.b\\.node "zz" is not a node of this topology',
          'links\\[1\\]\\.a\\.addresses\\[0\\] "10\\.0\\.0\\.1" must be an address with a length',
          'links\\[1\\]\\.b\\.iface "e0" is used twice in node "a"',
          'nodes\\.a\\.routes\\[0\\]: a default route without via needs its family: write 0\\.0\\.0\\.0/0 or ::/0',
          'nodes\\.a\\.routes\\[1\\]: to "10\\.0\\.0\\.1/8" has host bits set',
          'nodes\\.a\\.routes\\[1\\]: to "10\\.0\\.0\\.1/8" and via "::1" are of different families',
        ].join('.*'),
      ),
    );
  });

  it('accepts a topology whose routes name their family through via or the prefix', () => {
    expect(() => {
      validateTopology({
        nodes: {
          a: {
            routes: [
              { to: 'default', via: 'fd00::1' },
              { to: '::/0', type: 'blackhole', metric: 9 },
              { to: '0.0.0.0/0', dev: 'e0', table: 100 },
            ],
          },
        },
        links: [{ a: { node: 'a', iface: 'e0' }, b: { node: 'a', iface: 'e1' } }],
      });
    }).not.toThrow();
  });
});
