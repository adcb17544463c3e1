/** A Cilium minor release, the unit in which the CRDs and the egress gateway's features change. */
export interface CiliumVersion {
  readonly major: number;
  readonly minor: number;
}

/**
 * The releases the pinned schemas in schema/cilium/ cover: the egress gateway schema is 1.17.1's,
 * the network policy schemas 1.18.2's, and for 1.18 the gateway's CIDR patterns are widened to
 * both families at load time (schema/cilium/SOURCES.md).
 */
export const SUPPORTED_CILIUM_VERSIONS: readonly string[] = ['1.17', '1.18'];

/** The newest release the pinned schemas cover. */
export const DEFAULT_CILIUM_VERSION = '1.18';

/** Parses "1.18", "1.18.2" or "v1.18.2"; undefined when malformed. */
export function parseCiliumVersion(text: string): CiliumVersion | undefined {
  const match = /^v?(\d{1,3})\.(\d{1,3})(?:\.\d{1,3})?$/.exec(text.trim());
  if (match === null) return undefined;
  return { major: Number(match[1]), minor: Number(match[2]) };
}

export function formatCiliumVersion(version: CiliumVersion): string {
  return `${version.major}.${version.minor}`;
}

export function isSupportedCiliumVersion(version: CiliumVersion): boolean {
  return SUPPORTED_CILIUM_VERSIONS.includes(formatCiliumVersion(version));
}

function isAtLeast(version: CiliumVersion, major: number, minor: number): boolean {
  return version.major > major || (version.major === major && version.minor >= minor);
}

/**
 * IPv6 egress gateway (IPv6 destinations, the IPv6 address of `interface`) exists from 1.18:
 * "this is coming in v1.18" (maintainer, cilium/cilium#40075); up to 1.17 the docs said
 * "Egress gateway is not supported for IPv6 traffic" (cilium/cilium#24244, #36201).
 */
export function supportsIpv6EgressGateway(version: CiliumVersion): boolean {
  return isAtLeast(version, 1, 18);
}
