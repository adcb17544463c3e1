import type { PolicyRule } from './policy.js';

/**
 * Ingress interfaces on which the host itself usually serves DHCP to its workloads: macOS
 * vmnet's shared and host networks (`bridge100`, `bridge101`, …: bootpd), libvirt's (`virbr0`:
 * dnsmasq), LXD's and Incus's (`lxdbr0`, `incusbr0`: dnsmasq), LXC's (`lxcbr0`).
 */
const HOST_DHCP_INTERFACE = /^(bridge1\d\d|virbr\d+|lxdbr\d+|incusbr\d+|lxcbr\d+)$/;

/**
 * Whether a forwarded class's rules deny its workloads' DHCP renewals and rebinds to the host
 * on an interface where the host serves DHCP, and by which rule (or the class default). A lease
 * is renewed by unicast to the server and rebound by broadcast from the leased address (RFC 2131
 * §4.4.5), both UDP port 67 to the host: the bootstrap exception every backend adds (from
 * 0.0.0.0 to 255.255.255.255) covers neither, so a class that denies the host loses its leases
 * as they expire. Null when a rule allows them first, when no rule decides them (a class whose
 * default denies everything it does not list is left to its author), or when no ingress
 * interface is one where the host usually serves DHCP.
 */
export function findDhcpToHostDenial(cls: {
  readonly origin: 'forwarded' | 'host';
  readonly ingress: readonly string[];
  readonly rules: readonly PolicyRule[];
}): { readonly interfaces: readonly string[]; readonly by: string } | null {
  if (cls.origin !== 'forwarded') return null;
  const interfaces = cls.ingress.filter((name) => HOST_DHCP_INTERFACE.test(name));
  if (interfaces.length === 0) return null;
  // First match wins: the first rule that a UDP datagram to the host's port 67 matches decides.
  const first = cls.rules.find(
    (rule) =>
      (rule.destination.kind === 'self' || rule.destination.kind === 'any') &&
      (rule.protocols === null || rule.protocols.includes('udp') || rule.protocols.includes(17)) &&
      (rule.ports === null || rule.ports.some((p) => p.from <= 67 && 67 <= p.to)),
  );
  return first?.action === 'deny' ? { interfaces, by: first.id } : null;
}
