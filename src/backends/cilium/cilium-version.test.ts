import { describe, expect, it } from 'vitest';
import {
  isSupportedCiliumVersion,
  parseCiliumVersion,
  supportsIpv6EgressGateway,
} from './cilium-version.js';

describe('Cilium versions', () => {
  it('parses minor and patch releases, with or without a v', () => {
    expect(parseCiliumVersion('1.18')).toEqual({ major: 1, minor: 18 });
    expect(parseCiliumVersion('v1.17.1')).toEqual({ major: 1, minor: 17 });
    expect(parseCiliumVersion('1.18.x')).toBeUndefined();
    expect(parseCiliumVersion('latest')).toBeUndefined();
  });

  it('supports the releases the pinned schemas cover, and IPv6 egress gateway from 1.18', () => {
    const v = (text: string) => parseCiliumVersion(text) ?? { major: 0, minor: 0 };
    expect(['1.16', '1.17', '1.18', '1.19'].map((t) => isSupportedCiliumVersion(v(t)))).toEqual([
      false,
      true,
      true,
      false,
    ]);
    expect(supportsIpv6EgressGateway(v('1.17.9'))).toBe(false);
    expect(supportsIpv6EgressGateway(v('1.18.0'))).toBe(true);
    expect(supportsIpv6EgressGateway(v('2.0'))).toBe(true);
  });
});
