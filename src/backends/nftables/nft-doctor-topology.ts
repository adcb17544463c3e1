import { matchesInterface } from '../../ir/index.js';
import type { DoctorContext, DoctorFinding, DoctorSnapshot } from './nft-doctor-snapshot.js';

/** One entry of `ip -j -d link show`. */
interface IpLinkJson {
  ifname?: string;
  /** The peer of a veth, the parent of a macvlan/ipvlan (same namespace). */
  link?: string;
  master?: string;
  linkinfo?: {
    info_kind?: string;
    info_slave_kind?: string;
    info_data?: { mode?: string };
  };
  xdp?: {
    mode?: number;
    prog?: BpfProgJson;
    attached?: { mode?: number; prog?: BpfProgJson }[];
  };
}

interface BpfProgJson {
  id?: number;
  name?: string;
  tag?: string;
}

/** One entry of `tc -j filter show`; the first line of each filter comes without options. */
interface TcFilterJson {
  kind?: string;
  pref?: number;
  options?: {
    bpf_name?: string;
    'direct-action'?: boolean;
    prog?: BpfProgJson;
    bytecode?: unknown;
  };
}

// Links that switch workload traffic at layer 2 past this namespace's IP hooks.
const L2_SUBLINKS = new Set(['macvlan', 'macvtap', 'ipvlan', 'ipvtap']);
const IPSEC_INTERFACES = new Set(['xfrm', 'vti', 'vti6']);
// include/uapi/linux/if_link.h: XDP_ATTACHED_*
const XDP_MODES: Record<number, string> = { 1: 'driver', 2: 'generic', 3: 'offload', 4: 'multi' };

/**
 * Paths netfilter does not see (DESIGN.md §4): workloads bridged with the uplink, class
 * interfaces that are bridge ports, macvlan/ipvlan, netkit, XDP and tc eBPF programs, and IPsec
 * policies without an xfrm interface.
 */
export function classifyTopology(
  snapshot: Pick<DoctorSnapshot, 'links' | 'tcFilters' | 'xfrmPolicies' | 'bridgeNetfilter'>,
  context: Pick<
    DoctorContext,
    'uplink' | 'uplinkProblem' | 'classes' | 'tunnels' | 'missingIngress'
  >,
): DoctorFinding[] {
  const links = Array.isArray(snapshot.links) ? (snapshot.links as IpLinkJson[]) : [];
  const byName = new Map(links.flatMap((l) => (l.ifname === undefined ? [] : [[l.ifname, l]])));
  const kindOf = (name: string | undefined): string | undefined =>
    name === undefined ? undefined : byName.get(name)?.linkinfo?.info_kind;
  const portsOf = (bridge: string): string[] =>
    links.flatMap((l) => (l.master === bridge && l.ifname !== undefined ? [l.ifname] : []));
  const findings: DoctorFinding[] = [];

  for (const missing of context.missingIngress) {
    findings.push({
      severity: 'warning',
      area: 'topology',
      code: 'ingress-missing',
      message: `Class "${missing.class}" names ingress "${missing.interface}", which this host does not have${missing.suggestion}: the class filters nothing until it appears, and workloads behind another interface leave unfiltered`,
      hint: 'fix the name in the policy, or leave it if the interface is created later (a bridge made when the first workload starts): it is filtered from the moment it appears',
    });
  }

  if (context.uplink === null) {
    findings.push({
      severity: 'warning',
      area: 'topology',
      code: 'uplink-unresolved',
      message: `Cannot tell the uplink${context.uplinkProblem === null ? '' : `: ${context.uplinkProblem}`}, so whether workloads are bridged with it was not checked`,
      hint: 'name the uplink in the policy (interfaces.uplink: NAME) and pass the policy to doctor',
    });
  } else {
    const uplink = context.uplink;
    const master = byName.get(uplink)?.master;
    const bridge =
      kindOf(uplink) === 'bridge' ? uplink : kindOf(master) === 'bridge' ? master : undefined;
    const ports = bridge === undefined ? [] : portsOf(bridge).filter((p) => p !== uplink);
    if (bridge !== undefined && ports.length > 0) {
      const classes = context.classes.filter((c) =>
        [bridge, ...ports].some((name) => selects(c.interfaces, name)),
      );
      const shape =
        bridge === uplink
          ? `The uplink "${uplink}" is a bridge with ports ${quoteList(ports)}`
          : `The uplink "${uplink}" is a port of bridge "${bridge}", beside ${quoteList(ports)}`;
      const sentences = [
        `${shape}: workloads on those ports reach the outside at layer 2, so netfilter's forward hook never sees their packets and egressguard's class rules never apply to them`,
        ...(snapshot.bridgeNetfilter === true
          ? [
              'br_netfilter is loaded (bridge-nf-call-iptables=1): bridged IPv4 does reach the forward hook, but with the bridge as both input and output interface, which class rules written for routed traffic do not expect',
            ]
          : []),
        ...(classes.length > 0
          ? [
              `${classes.length === 1 ? 'Class' : 'Classes'} ${quoteList(classes.map((c) => c.name))} ${classes.length === 1 ? 'selects' : 'select'} interfaces on it`,
            ]
          : []),
      ];
      findings.push({
        severity: classes.length > 0 ? 'error' : 'warning',
        area: 'topology',
        code: 'uplink-bridged',
        message: sentences.join('. '),
        hint: 'route workloads instead: put them on a bridge of their own without the uplink and let the host forward them; or filter them in a bridge-family table',
      });
    }
  }

  for (const cls of context.classes) {
    const enslaved = new Map<string, string[]>();
    for (const link of links) {
      if (link.ifname === undefined || link.master === undefined) continue;
      if (!selects(cls.interfaces, link.ifname) || selects(cls.interfaces, link.master)) continue;
      if (kindOf(link.master) !== 'bridge') continue;
      enslaved.set(link.master, [...(enslaved.get(link.master) ?? []), link.ifname]);
    }
    for (const [bridge, ports] of enslaved) {
      findings.push({
        severity: 'error',
        area: 'topology',
        code: 'class-interface-bridge-port',
        message: `Class "${cls.name}" selects ${quoteList(ports)}, ${ports.length === 1 ? 'a port' : 'ports'} of bridge "${bridge}": routed packets from ${ports.length === 1 ? 'it' : 'them'} arrive on "${bridge}", so the class never matches and its traffic is not filtered`,
        hint: `select the bridge instead (ingress: [${bridge}])`,
      });
    }
  }

  for (const link of links) {
    const kind = link.linkinfo?.info_kind;
    const name = link.ifname ?? '?';
    if (kind !== undefined && L2_SUBLINKS.has(kind)) {
      const mode = link.linkinfo?.info_data?.mode;
      findings.push({
        severity: 'warning',
        area: 'topology',
        code: 'macvlan-link',
        message: `${kind} link "${name}"${mode === undefined ? '' : ` (mode ${mode})`} on "${link.link ?? '?'}": its traffic is switched by the parent device at layer 2, never forwarded by this host, so netfilter's forward hook does not see it`,
        hint: `filter such workloads in their own namespace, or attach them by a routed veth or bridge; ${kind} links moved into other namespaces (containers) are not visible from here`,
      });
    }
    if (kind === 'netkit') {
      findings.push({
        severity: 'warning',
        area: 'topology',
        code: 'netkit-link',
        message: `netkit link "${name}": its eBPF programs (Cilium's datapath) redirect packets between workloads and devices past netfilter`,
        hint: 'egressguard cannot enforce on that path: use the Cilium backend for those workloads',
      });
    }
    for (const attached of xdpPrograms(link)) {
      findings.push({
        severity: 'warning',
        area: 'topology',
        code: 'xdp-program',
        message: `XDP program ${describeProgram(attached.prog, ...(attached.mode === undefined ? [] : [`${XDP_MODES[attached.mode] ?? String(attached.mode)} mode`]))} is attached to "${name}": it runs before netfilter and can drop packets or redirect them to another device past every nftables hook`,
        hint: `check what it does (\`bpftool prog show id ${attached.prog.id ?? '?'}\`); Cilium and some load balancers attach XDP programs`,
      });
    }
  }

  for (const listing of snapshot.tcFilters ?? []) {
    const filters = Array.isArray(listing.filters) ? (listing.filters as TcFilterJson[]) : [];
    for (const filter of filters) {
      if (filter.kind !== 'bpf' || filter.options === undefined) continue;
      const where = `"${listing.dev}" ${listing.direction}`;
      const prog = filter.options.prog;
      if (prog !== undefined) {
        findings.push({
          severity: 'warning',
          area: 'topology',
          code: 'tc-bpf-program',
          message: `tc eBPF program ${describeProgram(prog, ...(filter.options['direct-action'] === true ? ['direct-action'] : []))} on ${where} can redirect packets to another device past netfilter, as Cilium's datapath does`,
          hint: "under Cilium's egress gateway, pod traffic bypasses netfilter (DESIGN.md §1 B): prove each layer from outside (`egressguard prove`); tcx attachments (kernel 6.6+) are not listed by tc and were not checked",
        });
      } else {
        findings.push({
          severity: 'info',
          area: 'topology',
          code: 'tc-classic-bpf',
          message: `tc classic BPF filter (pref ${filter.pref ?? '?'}) on ${where}: it classifies packets but cannot redirect them itself`,
          hint: 'nothing to do unless actions attached to it redirect (check `tc -s filter show dev DEV`)',
        });
      }
    }
  }

  // Say what was not checked: a check that silently did not run reads as a clean bill.
  if (snapshot.tcFilters === null) {
    findings.push({
      severity: 'info',
      area: 'topology',
      code: 'check-skipped',
      message: 'tc is not installed or could not list qdiscs: tc eBPF filters were not checked',
      hint: 'install iproute2 (it ships tc) and run doctor again',
    });
  }
  if (snapshot.xfrmPolicies === null) {
    findings.push({
      severity: 'info',
      area: 'topology',
      code: 'check-skipped',
      message: '`ip xfrm policy show` failed: IPsec policies were not checked',
      hint: 'load the xfrm modules or run doctor as root',
    });
  }

  const ipsec = parseXfrmPolicies(snapshot.xfrmPolicies ?? '').filter(
    (p) => p.dir === 'out' || p.dir === 'fwd',
  );
  const hasIpsecInterface = links.some((l) => IPSEC_INTERFACES.has(l.linkinfo?.info_kind ?? ''));
  if (ipsec.length > 0 && !hasIpsecInterface) {
    const example = ipsec[0];
    const absentTunnels = context.tunnels.filter((t) => !byName.has(t));
    findings.push({
      severity: 'warning',
      area: 'topology',
      code: 'ipsec-without-interface',
      message: `${ipsec.length} IPsec (xfrm) ${ipsec.length === 1 ? 'policy selects' : 'policies select'} traffic by address (e.g. ${example?.selector ?? '?'}, dir ${example?.dir ?? '?'}) and no xfrm or vti interface exists: packets they encrypt leave by the uplink's name, so nft cannot tell tunnelled from clear traffic and no tunnel class can match them by interface${absentTunnels.length > 0 ? ` (the policy's tunnel${absentTunnels.length === 1 ? '' : 's'} ${quoteList(absentTunnels)} ${absentTunnels.length === 1 ? 'does' : 'do'} not exist)` : ''}`,
      hint: "use route-based IPsec: an xfrm interface (`ip link add ipsec0 type xfrm if_id N`; strongSwan if_id_in/if_id_out) named as the class's tunnel",
    });
  }
  return findings;
}

/** Policies of `ip xfrm policy show`, which prints no JSON: a policy starts at column 0. */
export function parseXfrmPolicies(text: string): { selector: string; dir: string }[] {
  const policies: { selector: string; dir: string }[] = [];
  let current: { selector: string; dir: string } | undefined;
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    if (!/^\s/.test(line)) {
      current = { selector: line.trim(), dir: '' };
      policies.push(current);
      continue;
    }
    // Per-socket policies print "socket in|out" instead of "dir": they are not routing policies.
    const dir = /^\s*dir (in|out|fwd)\b/.exec(line);
    if (dir?.[1] !== undefined && current !== undefined) current.dir = dir[1];
  }
  return policies.filter((p) => p.dir !== '');
}

function xdpPrograms(link: IpLinkJson): { mode?: number; prog: BpfProgJson }[] {
  const xdp = link.xdp;
  if (xdp === undefined) return [];
  const attached = (xdp.attached ?? []).flatMap((a) =>
    a.prog === undefined
      ? []
      : [{ ...(a.mode === undefined ? {} : { mode: a.mode }), prog: a.prog }],
  );
  if (attached.length > 0) return attached;
  return xdp.prog === undefined
    ? []
    : [{ ...(xdp.mode === undefined ? {} : { mode: xdp.mode }), prog: xdp.prog }];
}

function describeProgram(prog: BpfProgJson, ...details: string[]): string {
  return `"${prog.name ?? '?'}" (${[`id ${prog.id ?? '?'}`, ...details].join(', ')})`;
}

function selects(patterns: readonly string[], name: string): boolean {
  return patterns.some((p) => matchesInterface(p, name));
}

function quoteList(items: readonly string[]): string {
  return items.map((i) => `"${i}"`).join(', ');
}
