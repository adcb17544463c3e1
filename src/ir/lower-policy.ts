import type { PodClass, Policy, PolicyClass, PolicyRule } from '../policy/index.js';
import { gatewayLabel } from './gateway-label.js';
import type { ClassIR, PodClassIR, PolicyIR, RuleIR } from './nodes.js';
import { deepFreeze } from './deep-freeze.js';

/** The id of the host-wide reassembly node; "/" keeps it apart from every policy rule id. */
export const REASSEMBLY_ID = 'egressguard/reassembly';

/**
 * Lowers a validated policy to the host-independent IR: what a controller holds for a whole
 * fleet. `bindHost` then binds one host's facts.
 */
export function lowerPolicy(policy: Policy): PolicyIR {
  return deepFreeze({
    kind: 'policy',
    name: policy.name,
    uplink:
      policy.uplink === 'default-route'
        ? { kind: 'default-route' }
        : { kind: 'named', interface: policy.uplink },
    tunnels: [...policy.tunnels],
    tunnelMatches: Object.fromEntries(
      Object.entries(policy.tunnelMatches).map(([name, m]) => [name, { ...m }]),
    ),
    reassembly: { kind: 'reassembly', id: REASSEMBLY_ID },
    classes: policy.classes.map(lowerClass),
    podClasses: policy.podClasses.map(lowerPodClass),
  });
}

function lowerClass(c: PolicyClass): ClassIR {
  const forwarded = c.origin === 'forwarded';
  const id = (what: string): string => `${c.name}/${what}`;
  return {
    kind: 'class',
    name: c.name,
    hostLabels: { ...c.labels },
    selector: forwarded
      ? { kind: 'ingress', interfaces: [...c.ingress], sources: c.sources }
      : { kind: 'host', sources: c.sources },
    via: c.via.kind === 'tunnel' ? { kind: 'tunnel', interface: c.via.name } : { kind: 'uplink' },
    // Host classes are selected by source in the output hook: no link, nothing to spoof.
    housekeeping: forwarded
      ? [
          { kind: 'neighbour-discovery', id: id('neighbour-discovery') },
          { kind: 'dhcp', id: id('dhcp') },
        ]
      : [],
    antiSpoofing: forwarded ? { kind: 'anti-spoofing', id: id('anti-spoofing') } : null,
    ipv6Block:
      forwarded && c.ipv6 === 'block' && !c.sources.has(6)
        ? { kind: 'ipv6-block', id: id('ipv6-block') }
        : null,
    killSwitch:
      c.killSwitch === null
        ? null
        : { kind: 'kill-switch', id: id('kill-switch'), except: c.killSwitch.except },
    mssClamp: c.mssClamp === null ? null : { kind: 'mss-clamp', size: c.mssClamp },
    nat: c.nat ? { kind: 'masquerade' } : null,
    rules: c.rules.map(lowerRule),
    defaultRule: { kind: 'default', id: id('default'), action: c.defaultAction },
  };
}

function lowerRule(r: PolicyRule): RuleIR {
  return {
    kind: 'rule',
    id: r.id,
    action: r.action,
    match: { destination: r.destination, protocols: r.protocols, ports: r.ports },
  };
}

function lowerPodClass(c: PodClass): PodClassIR {
  return {
    kind: 'pod-class',
    name: c.name,
    selector: { kind: 'pods', namespace: c.namespace, labels: { ...c.labels } },
    via: c.via.kind === 'tunnel' ? { kind: 'tunnel', interface: c.via.name } : { kind: 'uplink' },
    killSwitch:
      c.killSwitch === null
        ? null
        : {
            kind: 'pod-kill-switch',
            id: `${c.name}/kill-switch`,
            except: c.killSwitch.except,
            nodeLabel: gatewayLabel(c.name),
          },
    rules: c.rules.map(lowerRule),
    defaultRule: { kind: 'default', id: `${c.name}/default`, action: c.defaultAction },
  };
}
