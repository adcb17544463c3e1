import { hostname } from 'node:os';
import { join } from 'node:path';
import { EgressguardError } from '../core/index.js';
import type { Runner } from '../runner/index.js';
import { parseHostFacts, type HostFacts } from './host-facts.js';
import { parseIfconfig } from './parse-ifconfig.js';
import { parseNetstatRoutes, parseRouteGet } from './parse-netstat-routes.js';

/** Names a directory holding the macOS tools to run instead (the macOS model's shims, in tests). */
export const MACOS_TOOLS_ENV = 'EGRESSGUARD_MACOS_TOOLS';

const TOOLS = {
  ifconfig: '/sbin/ifconfig',
  netstat: '/usr/sbin/netstat',
  route: '/sbin/route',
  sw_vers: '/usr/bin/sw_vers',
  uname: '/usr/bin/uname',
} as const;

/**
 * Reads a macOS host through the runner: interfaces and addresses (`ifconfig`), IPv4 routes
 * (`netstat -rn -f inet`, the primary default from `route -n get default`), the OS version
 * (`sw_vers`) and the Darwin release (`uname -r`). Interface-scoped routes (flag I: a VPN's
 * second default) and host routes are not the host's routing and are left out.
 */
export async function gatherDarwinFacts(
  runner: Runner,
  options: {
    labels?: Readonly<Record<string, string>>;
    tools?: boolean;
    readVersions?: (runner: Runner) => Promise<Readonly<Record<string, string>>>;
  } = {},
): Promise<HostFacts> {
  requireMacosTools();
  const tool = (name: keyof typeof TOOLS): string => toolPath(name);
  const [ifconfig, netstat, route, swVers, uname, versions] = await Promise.all([
    runner.run([tool('ifconfig')], { effect: 'read' }),
    runner.run([tool('netstat'), '-rn', '-f', 'inet'], { effect: 'read' }),
    // No default route is an answer ("not in table"), not a failure of the host.
    runner.run([tool('route'), '-n', 'get', 'default'], { effect: 'read', allowFailure: true }),
    runner.run([tool('sw_vers')], { effect: 'read', allowFailure: true }),
    runner.run([tool('uname'), '-r'], { effect: 'read', allowFailure: true }),
    options.tools === false || options.readVersions === undefined
      ? {}
      : options.readVersions(runner).catch(() => ({})),
  ]);
  const interfaces = readIfconfig(ifconfig.stdout);
  const primary = route.exitCode === 0 ? parseRouteGet(route.stdout) : null;
  const routes = parseNetstatRoutes(netstat.stdout).filter(
    (r) => !/[HIWmb]/.test(r.flags) && !r.destination.endsWith('/32'),
  );
  const defaults = routes.filter(
    (r) => r.destination === 'default' && (primary === null || r.interface === primary.interface),
  );
  if (defaults.length === 0 && primary !== null) {
    defaults.push({
      destination: 'default',
      gateway: primary.gateway,
      flags: '',
      interface: primary.interface,
    });
  }
  const product = parseSwVers(swVers.stdout);
  const tools: Record<string, string> = { ...versions };
  if (product !== null) tools['macos'] = product.version;
  const kernel = uname.stdout.trim();
  return parseHostFacts(
    {
      schema: 'egressguard/facts/v1',
      hostname: hostname(),
      os: 'darwin',
      ...(kernel === '' ? {} : { kernel }),
      tools,
      labels: { ...options.labels },
      interfaces,
      routes: [...defaults, ...routes.filter((r) => r.destination !== 'default')].map((r) => ({
        destination: r.destination,
        interface: r.interface,
        ...(r.gateway === null ? {} : { gateway: r.gateway }),
      })),
    },
    'the live host',
  );
}

/**
 * The interfaces of a macOS host alone (`ifconfig`): what the tunnels found by `match` are read
 * from at every re-converge and boot, and what pf's inspector reports of a tunnel.
 */
export async function gatherDarwinInterfaces(runner: Runner): Promise<HostFacts['interfaces']> {
  requireMacosTools();
  const ifconfig = await runner.run([toolPath('ifconfig')], { effect: 'read' });
  return readIfconfig(ifconfig.stdout);
}

function toolPath(name: keyof typeof TOOLS): string {
  const dir = process.env[MACOS_TOOLS_ENV];
  return dir === undefined || dir === '' ? TOOLS[name] : join(dir, name);
}

function requireMacosTools(): void {
  const dir = process.env[MACOS_TOOLS_ENV];
  if (process.platform !== 'darwin' && (dir === undefined || dir === '')) {
    throw new EgressguardError(
      'unsupported',
      `Cannot gather macOS facts on ${process.platform}: ifconfig, netstat and route here are not macOS's`,
      {
        hint: `give --facts FILE, or set ${MACOS_TOOLS_ENV} to a directory of macOS tool models (docs/macos.md)`,
      },
    );
  }
}

function readIfconfig(text: string): HostFacts['interfaces'] {
  let interfaces;
  try {
    interfaces = parseIfconfig(text);
  } catch (error) {
    throw new EgressguardError(
      'facts',
      `Cannot read the interfaces "ifconfig" printed: ${(error as Error).message}`,
      { hint: 'give --facts FILE, and report the ifconfig output' },
    );
  }
  return interfaces.map((i) => ({
    name: i.name,
    up: i.flags.includes('UP'),
    addresses: [...i.addresses],
    // A tunnel class can find its utun by this peer (`match: { peer }`): utun numbers move.
    ...(i.peer === null ? {} : { peer: i.peer }),
  }));
}

/** `sw_vers` (sw_vers(1)): `ProductName:`, `ProductVersion:`, `BuildVersion:` lines. */
export function parseSwVers(
  text: string,
): { readonly name: string; readonly version: string; readonly build: string } | null {
  const field = (name: string): string | undefined =>
    new RegExp(`^${name}:\\s*(.+?)\\s*$`, 'm').exec(text)?.[1];
  const version = field('ProductVersion');
  if (version === undefined) return null;
  return { name: field('ProductName') ?? 'macOS', version, build: field('BuildVersion') ?? '' };
}
