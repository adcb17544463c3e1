import { AddressSet, parsePrefix, type Prefix } from '../core/index.js';
import { resolveUplink, type HostFacts } from '../facts/index.js';
import type { Policy, PolicyClass } from '../policy/index.js';
import { isClassOnHost } from './classes-on-host.js';
import type { ClassIR, PolicyIR } from './nodes.js';

/** Lowers a validated policy, with the host's facts, to the immutable IR. */
export function lowerPolicy(policy: Policy, facts: HostFacts): PolicyIR {
  const uplink = resolveUplink(facts, policy.uplink, policy.tunnels);
  const localPrefixes: Prefix[] = [];
  for (const iface of facts.interfaces) {
    if (iface.name === uplink || policy.tunnels.includes(iface.name)) continue;
    for (const address of iface.addresses) {
      const prefix = parsePrefix(address);
      // Loopback and link-local never leave the host: no route needed.
      if (prefix === undefined || isHostScoped(prefix)) continue;
      localPrefixes.push(prefix);
    }
  }
  const classes = policy.classes
    .filter((c) => isClassOnHost(c, facts))
    .map((c) => lowerClass(c, uplink));
  return deepFreeze({
    kind: 'policy',
    name: policy.name,
    uplink,
    tunnels: [...policy.tunnels],
    localPrefixes: AddressSet.fromPrefixes(localPrefixes),
    classes,
  });
}

function lowerClass(c: PolicyClass, uplink: string): ClassIR {
  return {
    kind: 'class',
    name: c.name,
    selector:
      c.origin === 'host'
        ? { kind: 'host', sources: c.sources }
        : { kind: 'ingress', interfaces: [...c.ingress], sources: c.sources },
    blockUnlistedIpv6: c.ipv6 === 'block',
    via:
      c.via.kind === 'tunnel'
        ? { kind: 'tunnel', interface: c.via.name }
        : { kind: 'uplink', interface: uplink },
    rules: c.rules.map((r) => ({
      kind: 'rule',
      id: r.id,
      action: r.action,
      match: { destination: r.destination, protocols: r.protocols, ports: r.ports },
    })),
    defaultAction: { id: `${c.name}/default`, action: c.defaultAction },
    antiSpoofingId: `${c.name}/anti-spoofing`,
    nat: c.nat,
    mssClamp: c.mssClamp,
    killSwitch:
      c.killSwitch === null
        ? null
        : { kind: 'kill-switch', id: `${c.name}/kill-switch`, except: c.killSwitch.except },
  };
}

function isHostScoped(prefix: Prefix): boolean {
  if (prefix.family === 4) return (prefix.start as number) >>> 24 === 127;
  const start = prefix.start as bigint;
  return start === 1n || start >> 118n === 0x3fan; // ::1, fe80::/10
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}
