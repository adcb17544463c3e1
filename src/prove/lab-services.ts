import { existsSync } from 'node:fs';
import { EgressguardError, packagePath } from '../core/index.js';
import type { Lab } from './lab/create-lab.js';
import { labPython } from './lab/lab-python.js';
import { routeLine } from './lab/plan-lab.js';
import { routeFamily, type LinkRef } from './lab/topology.js';
import type { ProofLab } from './plan-proof-lab.js';

/** The path of a script of scripts/lab/ (shipped with the package). */
export function labScript(name: 'echo.py' | 'probe.py' | 'sender.py'): string {
  const path = packagePath('scripts', 'lab', name);
  if (!existsSync(path)) {
    throw new EgressguardError('io', `Cannot find the lab script "${path}"`, {
      hint: 'reinstall egressguard: its package ships scripts/lab/',
    });
  }
  return path;
}

// Generous: a Python start beside a busy machine (load 15 on 2 cores) took over 5 s.
const READY_TIMEOUT_MS = 30_000;

/**
 * Makes the planned lab answer: the far sides' addresses (on their loopback) and echo services,
 * the workloads' probe sources, and the VPN client's routes on the host. Everything it starts
 * is stopped when the lab is destroyed.
 */
export async function startLabServices(lab: Lab, plan: ProofLab): Promise<void> {
  const loopback = (addresses: readonly string[]): string[] =>
    addresses.map((a) =>
      a.includes(':') ? `address add ${a}/128 dev lo nodad` : `address add ${a}/32 dev lo`,
    );
  await Promise.all([
    ...plan.farSides.map((side) => batch(lab, side.node, loopback(plan.farAddresses))),
    ...[...plan.sources].map(([node, addresses]) => batch(lab, node, loopback(addresses))),
    ...plan.tunnels.map((t) => addTunnelRoutes(lab, plan, t.iface)),
  ]);
  await Promise.all(
    plan.farSides.map((side) =>
      startService(lab, side.node, [
        'serve',
        side.node,
        '--tcp',
        plan.tcpPorts.join(','),
        '--udp',
        plan.udpPorts.join(','),
        '--addresses',
        plan.farAddresses.join(','),
      ]),
    ),
  );
}

/** Puts the lab VPN client's routes through a tunnel back (they vanish with the tunnel). */
export async function addTunnelRoutes(lab: Lab, plan: ProofLab, tunnel: string): Promise<void> {
  const prefixes = plan.tunnelRoutes.get(tunnel) ?? [];
  await batch(
    lab,
    plan.host,
    prefixes.map((p) => `route replace ${p} dev ${tunnel}`),
  );
}

/**
 * Gives a link end its addresses of the topology back, as a VPN client does when it brings its
 * tunnel up: the kernel flushes an interface's IPv6 addresses when it goes down
 * (net.ipv6.conf.*.keep_addr_on_down is 0 by default), and without its IPv6 address a tunnel
 * class's IPv6 is masqueraded to another interface's address.
 */
export async function restoreLinkAddresses(lab: Lab, ref: LinkRef): Promise<void> {
  await batch(
    lab,
    ref.node,
    lab
      .addressesOf(ref)
      .map((a) => `address replace ${a} dev ${ref.iface}${a.includes(':') ? ' nodad' : ''}`),
  );
}

/** The link end's addresses of the topology it lacks. */
export async function missingLinkAddresses(lab: Lab, ref: LinkRef): Promise<string[]> {
  const { stdout } = await lab
    .runner(ref.node)
    .run(['ip', '-j', 'address', 'show', 'dev', ref.iface], { effect: 'read', allowFailure: true });
  const [entry] = JSON.parse(stdout || '[]') as {
    addr_info?: { local: string; prefixlen: number }[];
  }[];
  const present = new Set((entry?.addr_info ?? []).map((a) => `${a.local}/${String(a.prefixlen)}`));
  return lab.addressesOf(ref).filter((a) => !present.has(a));
}

/**
 * Puts a node's routes of the topology back: a link that went down took its routes with it, and
 * a real far side (a VPN server, the internet) never loses them.
 */
export async function restoreNodeRoutes(lab: Lab, node: string): Promise<void> {
  const routes = lab.topology.nodes[node]?.routes ?? [];
  await batch(
    lab,
    node,
    routes.map((r) => routeLine(r, 'replace')),
  );
}

/** The node's routes of the topology that are missing, as `ip route` lines. */
export async function missingNodeRoutes(lab: Lab, node: string): Promise<string[]> {
  const missing: string[] = [];
  for (const route of lab.topology.nodes[node]?.routes ?? []) {
    const family = routeFamily(route) === 6 ? '-6' : '-4';
    const to =
      route.to === 'default' ? 'default' : route.to.replace(/^(0\.0\.0\.0|::)\/0$/, 'default');
    const argv = ['ip', family, 'route', 'show', to];
    if (route.table !== undefined) argv.push('table', String(route.table));
    const { stdout } = await lab.runner(node).run(argv, { effect: 'read', allowFailure: true });
    if (stdout.trim() === '') missing.push(routeLine(route));
  }
  return missing;
}

/** Whether the lab VPN client's routes through a tunnel are in place. */
export async function hasTunnelRoutes(lab: Lab, plan: ProofLab, tunnel: string): Promise<boolean> {
  const { stdout } = await lab
    .runner(plan.host)
    .run(['ip', '-4', 'route', 'show', 'dev', tunnel], { effect: 'read', allowFailure: true });
  return (plan.tunnelRoutes.get(tunnel) ?? []).every((p) =>
    stdout.includes(p.replace(/\/32$/, '')),
  );
}

/**
 * Starts scripts/lab/echo.py in a node and waits for it to report ready; stopped with the lab.
 * Returns a stop function for services that end before the lab does.
 */
export async function startService(
  lab: Lab,
  node: string,
  args: readonly string[],
): Promise<() => Promise<void>> {
  const runner = lab.runner(node);
  const running = runner.start([await labPython(runner), labScript('echo.py'), ...args], {
    effect: 'change',
  });
  const undefer = lab.defer(() => running.stop());
  const lines = running.lines[Symbol.asyncIterator]();
  let timer: NodeJS.Timeout | undefined;
  const ready = await Promise.race([
    lines.next().then((r) => (r.done === true ? 'ended' : r.value)),
    new Promise<'timed out'>((resolve) => {
      timer = setTimeout(() => {
        resolve('timed out');
      }, READY_TIMEOUT_MS);
    }),
  ]);
  clearTimeout(timer);
  if (!ready.includes('"ready"')) {
    await running.stop();
    undefer();
    const why =
      ready === 'ended'
        ? 'it exited before reporting ready'
        : ready === 'timed out'
          ? `it did not report ready within ${String(READY_TIMEOUT_MS)} ms`
          : `it reported ${ready} instead of ready`;
    throw new EgressguardError(
      'command-failed',
      `Cannot start the lab service "echo.py ${args.join(' ')}" in node "${node}": ${why}`,
    );
  }
  return async () => {
    undefer();
    await running.stop();
  };
}

async function batch(lab: Lab, node: string, lines: readonly string[]): Promise<void> {
  if (lines.length === 0) return;
  await lab.runner(node).run(['ip', '-force', '-batch', '-'], {
    effect: 'change',
    input: `${lines.join('\n')}\n`,
    allowFailure: true,
  });
}
