import { hostname, release } from 'node:os';
import { readFileSync } from 'node:fs';
import { EgressguardError } from '../core/index.js';
import type { Runner } from '../runner/index.js';
import { gatherDarwinFacts, gatherDarwinInterfaces } from './gather-darwin-facts.js';
import { parseHostFacts, type HostFacts } from './host-facts.js';
import { hostOs } from './host-os.js';

interface IpAddrJson {
  ifname: string;
  ifindex: number;
  flags?: string[];
  operstate?: string;
  link_type?: string;
  linkinfo?: { info_kind?: string };
  addr_info?: { family: string; local: string; prefixlen: number; scope?: string }[];
}

interface IpRouteJson {
  dst: string;
  dev?: string;
  gateway?: string;
  metric?: number;
  type?: string;
}

/**
 * Reads the live host (or a namespace) through the runner: interfaces, routes, labels, and the
 * version of ip and of the tools `readVersions` reads (a backend's) unless `tools` is false (they
 * are for reading, and no compile uses them: an apply saves processes).
 */
export async function gatherFacts(
  runner: Runner,
  options: {
    labels?: Readonly<Record<string, string>>;
    tools?: boolean;
    readVersions?: (runner: Runner) => Promise<Readonly<Record<string, string>>>;
    /** The OS of the host read (default: this machine's): the backend's, for `doctor`. */
    os?: HostFacts['os'];
  } = {},
): Promise<HostFacts> {
  const { os = hostOs(), ...rest } = options;
  if (os === 'darwin') return gatherDarwinFacts(runner, rest);
  if (process.platform !== 'linux') {
    throw new EgressguardError('unsupported', `Cannot gather facts on ${process.platform} yet`, {
      hint: 'write facts.json by hand (see testdata/policies/valid/macos-runner-fleet/facts.json)',
    });
  }
  // Independent listings, each a process: run them at once.
  const [addresses, routes4, routes6, ipv6, versions, ip] = await Promise.all([
    runner.run(['ip', '-j', '-d', 'addr', 'show'], { effect: 'read' }),
    runner.run(['ip', '-j', '-4', 'route', 'show', 'table', 'main'], { effect: 'read' }),
    runner.run(['ip', '-j', '-6', 'route', 'show', 'table', 'main'], { effect: 'read' }),
    // An IPv4-only tunnel (disable_ipv6 = 1) refuses IPv6 routes: its classes' IPv6 must be
    // blocked, not the whole apply failed. The files are per namespace, so read them in it.
    runner.run(['sysctl', '-e', '-a', '-r', '^net\\.ipv6\\.conf\\..*\\.disable_ipv6$'], {
      effect: 'read',
      allowFailure: true,
    }),
    options.tools === false || options.readVersions === undefined
      ? {}
      : options.readVersions(runner).catch(() => ({})),
    options.tools === false
      ? undefined
      : runner.run(['ip', '-V'], { effect: 'read', allowFailure: true }),
  ]);
  const links = JSON.parse(addresses.stdout) as IpAddrJson[];
  const disabledIpv6 = parseDisabledIpv6(ipv6.stdout);
  const routes = [routes4, routes6].flatMap((r) => JSON.parse(r.stdout || '[]') as IpRouteJson[]);
  const tools: Record<string, string> = { ...versions };
  const ipVersion = /(\d+\.\d+\.\d+)/.exec(ip?.stdout ?? '')?.[1];
  if (ipVersion !== undefined) tools['ip'] = ipVersion;

  return parseHostFacts(
    {
      schema: 'egressguard/facts/v1',
      hostname: readHostname(),
      os: 'linux',
      kernel: release(),
      tools,
      labels: { ...options.labels },
      interfaces: links.map((l) => ({
        name: l.ifname,
        index: l.ifindex,
        up: l.operstate === 'UP' || (l.flags ?? []).includes('UP'),
        ...(l.linkinfo?.info_kind === undefined ? {} : { kind: l.linkinfo.info_kind }),
        addresses: (l.addr_info ?? [])
          .filter((a) => a.family === 'inet' || a.family === 'inet6')
          .map((a) => `${a.local}/${a.prefixlen}`),
        ...(disabledIpv6.has(l.ifname) ? { ipv6: false } : {}),
      })),
      routes: routes
        .filter((r) => r.dev !== undefined && (r.type === undefined || r.type === 'unicast'))
        .map((r) => ({
          destination: r.dst,
          interface: r.dev ?? '',
          ...(r.gateway === undefined ? {} : { gateway: r.gateway }),
          ...(r.metric === undefined ? {} : { metric: r.metric }),
        })),
    },
    'the live host',
  );
}

/**
 * The interfaces alone of a host of `os`, read live: what a tunnel found by `match` is looked
 * up in (macOS: `ifconfig` only, none of the route listings).
 */
export async function gatherInterfaces(
  runner: Runner,
  options: { readonly os: HostFacts['os'] },
): Promise<HostFacts['interfaces']> {
  if (options.os === 'darwin') return gatherDarwinInterfaces(runner);
  return (await gatherFacts(runner, { os: options.os, tools: false })).interfaces;
}

function readHostname(): string {
  try {
    return readFileSync('/proc/sys/kernel/hostname', 'utf8').trim();
  } catch {
    return hostname();
  }
}

/**
 * Interfaces with IPv6 disabled, from `sysctl` lines like `net.ipv6.conf.tun0.disable_ipv6 = 1`
 * (sysctl writes a "." in an interface name as "/"). Without IPv6 in the kernel there are no such
 * lines, and no IPv6 routes to add either.
 */
function parseDisabledIpv6(text: string): Set<string> {
  const out = new Set<string>();
  for (const line of text.split('\n')) {
    const m = /^net\.ipv6\.conf\.(.+)\.disable_ipv6\s*=\s*1\s*$/.exec(line);
    if (m?.[1] !== undefined && m[1] !== 'all' && m[1] !== 'default') {
      out.add(m[1].replaceAll('/', '.'));
    }
  }
  return out;
}
