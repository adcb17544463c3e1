import { describe, expect, it } from 'vitest';
import { didYouMean } from './did-you-mean.js';

describe('did you mean', () => {
  it('suggests the closest candidate, ignoring case', () => {
    expect(didYouMean('killswitch', ['killSwitch', 'kill', 'via'])).toBe(
      ' (did you mean "killSwitch"?)',
    );
    expect(didYouMean('sorces', ['ingress', 'sources', 'rules'])).toBe(
      ' (did you mean "sources"?)',
    );
  });

  it('counts a swap of neighbouring letters as one edit', () => {
    expect(didYouMean('tnu0', ['tun0', 'uplink'])).toBe(' (did you mean "tun0"?)');
    expect(didYouMean('uplnik', ['tun0', 'uplink'])).toBe(' (did you mean "uplink"?)');
  });

  it('stays quiet when nothing is close', () => {
    expect(didYouMean('quic', ['tcp', 'udp', 'icmp'])).toBe('');
    expect(didYouMean('ab', ['id', 'to'])).toBe('');
    expect(didYouMean('anything', [])).toBe('');
  });

  it('allows one edit in three letters', () => {
    expect(didYouMean('privat', ['private'])).toBe(' (did you mean "private"?)');
    expect(didYouMean('prvte', ['private'])).toBe('');
    expect(didYouMean('build-clustr', ['build-cluster'])).toBe(' (did you mean "build-cluster"?)');
  });

  it('prefers the first of equally close candidates', () => {
    expect(didYouMean('tun', ['tun0', 'tun1'])).toBe(' (did you mean "tun0"?)');
  });
});
