import { describe, expect, it } from 'vitest';
import { isHostFactRoute } from './nft-watcher.js';

// Lines as `ip -o monitor route` prints them (iproute2 6.1).
describe('the route events that change host facts', () => {
  it.each([
    'default via 198.51.100.1 dev eth0 ',
    'Deleted default via 198.51.100.1 dev eth0 ',
    'default via fe80::1 dev eth0 proto ra metric 1024 expires 1799sec hoplimit 64 pref medium',
    '10.10.0.0/24 dev vwl0 proto kernel scope link src 10.10.0.1 ',
    'Deleted 2001:db8:10::/64 dev vwl0 proto kernel metric 256 pref medium',
  ])('%s is one', (line) => {
    expect(isHostFactRoute(line)).toBe(true);
  });

  it.each([
    'default dev tun0 table 7350 proto 104 metric 100 ',
    'blackhole default table 7350 proto 104 metric 4000000000 ',
    'throw 192.168.0.0/16 table 7350 proto 104 metric 50 ',
    'local 10.10.0.1 dev vwl0 table local proto kernel scope host src 10.10.0.1 ',
    '192.0.2.0/24 via 198.51.100.1 dev eth0 ',
  ])('%s is not', (line) => {
    expect(isHostFactRoute(line)).toBe(false);
  });
});
