import {
  AddressSet,
  formatAddress,
  parsePrefix,
  prefixEnd,
  type Prefix,
} from '../../src/core/index.js';
import type { HostFacts } from '../../src/facts/index.js';
import { createHostView, type HostIR, type HostView } from '../../src/ir/index.js';
import type { ConformanceHarness, Observed, TestPacket } from '../../src/backends/backend.js';
import { createMacosPfHost, readStockPfFiles } from './create-macos-pf-host.js';
import { installPfConfStanza } from '../../src/backends/pf/pf-conf-stanza.js';
import { HASH_LABEL_PREFIXES } from '../../src/backends/pf/pf-compiler.js';
import type { PfEvaluation, PfPacket } from './pf-evaluator.js';
import type { PfctlModel } from './pfctl-model.js';

/** What pf did with one packet, as the model saw it. */
export interface PfObserved extends Observed {
  /** The interface it left by (null when dropped, "local" when delivered to the host). */
  readonly via: string | null;
  /** Its source address on the wire after pf (NAT), when it left the host. */
  readonly egress: string | null;
}

export interface PfModelHarness extends ConformanceHarness {
  readonly model: PfctlModel;
  observeOne(packet: TestPacket): PfObserved;
  /**
   * The host's interfaces change (DHCP renumbers the uplink, say) and nothing is loaded again:
   * pf keeps the rules it has, and the host delivers and routes by the new facts.
   */
  renumber(facts: HostFacts): void;
}

const LINK_MULTICAST_V6 = AddressSet.parse(['ff02::/16']);
const EPHEMERAL_PORT = 49_152;

/**
 * Runs packets through the pf MODEL of a stock macOS host (stock /etc/pf.conf and com.apple
 * anchors, booted; pfctl-model.ts) with an anchor loaded into `anchor` by `pfctl -a ANCHOR -f -`,
 * and reads what pf decided from the deciding rule's label (our rule ids). The host around pf is
 * the facts': a destination the host takes as its own is delivered (`in` only), any other is
 * forwarded by the main table's longest match (`in` on the ingress, then `out` on the exit).
 *
 * Fragments go to the evaluator as fragments: the scrub rules pf reaches decide whether their
 * datagram is reassembled (then filtered whole, and a lone fragment is held and dropped) or each
 * is filtered as a fragment, without ports (pf-evaluator.ts, XNU pf_normalize_ip and
 * pf_test_fragment).
 *
 * Tunnel state: a packet judged with the tunnel down is sent while the tunnel's interface is
 * absent from the model (as a disconnected utun is), and back for one judged with it up.
 */
export function createPfModelHarness(input: {
  readonly ir: HostIR;
  readonly facts: HostFacts;
  readonly anchor: string;
  readonly anchorText: string;
  /**
   * `--pf-attach stanza`: the host booted a stock pf.conf holding these lines of ours (the
   * stanza's `scrub-anchor`, `nat-anchor`, `anchor` for a top-level anchor); absent: the stock
   * com.apple/* hooks reach the anchor.
   */
  readonly stanza?: readonly string[];
}): PfModelHarness {
  const interfaces: Record<string, string[]> = {};
  for (const iface of input.facts.interfaces) interfaces[iface.name] = [...iface.addresses];
  let pfConf: string | undefined;
  if (input.stanza !== undefined) {
    const installed = installPfConfStanza(readStockPfFiles().pfConf, {
      anchor: input.anchor,
      lines: input.stanza,
    });
    if (!installed.ok) throw new Error(installed.problem.message);
    pfConf = installed.result.text;
  }
  const model = createMacosPfHost({ interfaces, ...(pfConf === undefined ? {} : { pfConf }) });
  const loaded = model.run(['-a', input.anchor, '-f', '-'], { stdin: input.anchorText });
  if (loaded.exitCode !== 0) {
    throw new Error(`The pfctl model rejects the anchor: ${loaded.stderr}`);
  }
  let host = createHostView(input.facts);

  const observeOne = (tp: TestPacket): PfObserved => {
    const packet = tp.packet;
    const ingress = packet.ingress ?? ingressBySource(input.ir, packet.family, packet.source);
    if (ingress === undefined) {
      throw new Error('The pf harness sends packets that arrive on an interface only');
    }
    const protocol =
      packet.protocol === 'tcp'
        ? 6
        : packet.protocol === 'udp'
          ? 17
          : packet.protocol === 'icmp'
            ? packet.family === 4
              ? 1
              : 58
            : packet.protocol;
    const hasPorts = protocol === 6 || protocol === 17;
    const isIcmp = protocol === 1 || protocol === 58;
    const base: Omit<PfPacket, 'direction' | 'interface'> = {
      family: packet.family,
      source: packet.source,
      destination: packet.destination,
      protocol,
      ...(hasPorts
        ? {
            sourcePort: EPHEMERAL_PORT,
            ...(packet.port === undefined ? {} : { destinationPort: packet.port }),
          }
        : {}),
      ...(isIcmp ? { icmpType: packet.icmpType ?? (packet.family === 4 ? 8 : 128) } : {}),
      ...(packet.fragment === undefined ? {} : { fragment: packet.fragment }),
    };
    // Every packet opens a connection of its own: no state from an earlier one.
    model.state.states = [];
    setTunnels(tp.state.tunnel);
    const local = isLocal(host, packet.family, packet.destination);
    const routed = local ? null : lookupRoute(host, packet.family, packet.destination, ingress);
    if (local || routed === null) {
      const inbound = model.sendPacket({ ...base, direction: 'in', interface: ingress });
      // route-to sends even a packet for the host out of its target (pf.c pf_test → pf_route).
      if (inbound.verdict !== 'pass' || inbound.routeTo === null) {
        const via = inbound.verdict === 'pass' && local ? 'local' : null;
        return finish(inbound, inbound.verdict, via, null, input.ir.reassembly.id);
      }
      model.state.states = [];
    }
    const forwarded = model.forwardPacket({
      ...base,
      ingress,
      egress: routed ?? ingress,
    });
    // A forwarded packet meets the filter twice; the policy's decision is the later of the two
    // made by a rule of ours (a tunnel class's rules are judged out on the tunnel).
    const outbound = forwarded.outbound;
    const deciding =
      outbound !== null && outbound.decidedBy === 'rule' && isOurs(outbound.label)
        ? outbound
        : outbound !== null && outbound.verdict === 'block'
          ? outbound
          : forwarded.inbound;
    const leaving = forwarded.leaving;
    return finish(
      deciding,
      forwarded.verdict,
      forwarded.verdict === 'pass' ? forwarded.egress : null,
      leaving === null ? null : formatAddress(leaving.family, leaving.source),
      input.ir.reassembly.id,
    );
  };

  // A tunnel that is down is absent, as a disconnected utun is (the interface is destroyed with
  // its control socket): the model forgets it and gets it back with its addresses.
  const tunnelAddresses = new Map(
    input.ir.tunnels.flatMap((t) => (t.name in interfaces ? [[t.name, interfaces[t.name]]] : [])),
  );
  let tunnelState: 'up' | 'down' = 'up';
  const setTunnels = (state: 'up' | 'down'): void => {
    if (state === tunnelState) return;
    tunnelState = state;
    for (const [name, addresses] of tunnelAddresses) {
      model.setInterface(name, state === 'up' ? [...(addresses ?? [])] : null);
    }
  };

  const renumber = (facts: HostFacts): void => {
    host = createHostView(facts);
    const now = new Set(facts.interfaces.map((i) => i.name));
    for (const name of Object.keys(model.state.interfaces)) {
      if (!now.has(name)) model.setInterface(name, null);
    }
    for (const iface of facts.interfaces) model.setInterface(iface.name, [...iface.addresses]);
  };

  return {
    name: 'pf evaluator on the pfctl model (stock macOS pf.conf and com.apple anchors)',
    model,
    observeOne,
    renumber,
    observe(packets) {
      return Promise.resolve(packets.map(observeOne));
    },
  };
}

function finish(
  result: PfEvaluation,
  verdict: 'pass' | 'block',
  via: string | null,
  egress: string | null,
  reassemblyId: string,
): PfObserved {
  return {
    verdict: verdict === 'pass' ? 'allow' : 'deny',
    decidedBy:
      result.decidedBy === 'reassembly' ? reassemblyId : isOurs(result.label) ? result.label : null,
    via,
    egress,
  };
}

function isOurs(label: string | null): label is string {
  return label !== null && !HASH_LABEL_PREFIXES.some((p) => label.startsWith(p));
}

/** A packet given without its ingress arrives on its class's first interface. */
function ingressBySource(ir: HostIR, family: 4 | 6, source: number | bigint): string | undefined {
  for (const cls of ir.classes) {
    if (cls.selector.kind !== 'ingress') continue;
    if (!cls.selector.sources.contains(family, source)) continue;
    return cls.selector.interfaces[0];
  }
  return undefined;
}

function isLocal(host: HostView, family: 4 | 6, destination: number | bigint): boolean {
  return (
    host.addresses.contains(family, destination) ||
    (family === 6 && LINK_MULTICAST_V6.contains(6, destination))
  );
}

/** The main table's longest match; a link-local IPv6 destination is on the link it came by. */
function lookupRoute(
  host: HostView,
  family: 4 | 6,
  destination: number | bigint,
  ingress: string,
): string | null {
  const linkLocal = parsePrefix('fe80::/10') as Prefix;
  if (family === 6 && inside(linkLocal, destination)) return ingress;
  let best: { length: number; interface: string } | null = null;
  for (const route of host.routes) {
    if (route.prefix.family !== family) continue;
    if (best !== null && route.prefix.length <= best.length) continue;
    if (inside(route.prefix, destination)) {
      best = { length: route.prefix.length, interface: route.interface };
    }
  }
  return best?.interface ?? null;
}

function inside(prefix: Prefix, value: number | bigint): boolean {
  return value >= prefix.start && value <= prefixEnd(prefix);
}
