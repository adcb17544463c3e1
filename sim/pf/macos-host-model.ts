import { parsePrefix } from '../../src/core/index.js';
import type { HostFacts } from '../../src/facts/index.js';
import type { CommandOutcome } from './launchctl-model.js';

/**
 * A MODEL of the macOS tools facts are read with — `ifconfig`, `netstat -rn -f inet`,
 * `route -n get default`, `sw_vers`, `uname -r` — not the tools: it prints a modelled host in
 * their documented formats (the same formats the hand-written fixtures in
 * src/facts/fixtures/darwin/ follow; see their README for each source). Flag values are xnu's
 * `bsd/net/if.h` IFF_* bits.
 */
export interface MacosHostModel {
  readonly productVersion: string;
  readonly buildVersion: string;
  readonly darwinRelease: string;
  readonly interfaces: readonly {
    readonly name: string;
    readonly up: boolean;
    readonly addresses: readonly string[];
    /** A point-to-point link's far end (`inet A --> PEER`). */
    readonly peer?: string;
  }[];
  readonly routes: readonly {
    readonly destination: string;
    readonly interface: string;
    readonly gateway?: string;
  }[];
}

/** A modelled host with the interfaces and routes of these facts. */
export function createMacosHostModel(
  facts: Pick<HostFacts, 'interfaces' | 'routes'>,
  version: { productVersion?: string; buildVersion?: string; darwinRelease?: string } = {},
): MacosHostModel {
  return {
    productVersion: version.productVersion ?? '15.6',
    buildVersion: version.buildVersion ?? '24G84',
    darwinRelease: version.darwinRelease ?? '24.6.0',
    interfaces: facts.interfaces.map((i) => ({
      name: i.name,
      up: i.up,
      addresses: [...i.addresses],
      ...(i.peer === undefined ? {} : { peer: i.peer }),
    })),
    routes: facts.routes.map((r) => ({
      destination: r.destination,
      interface: r.interface,
      ...(r.gateway === undefined ? {} : { gateway: r.gateway }),
    })),
  };
}

const IFF: Readonly<Record<string, number>> = {
  UP: 0x1,
  BROADCAST: 0x2,
  LOOPBACK: 0x8,
  POINTOPOINT: 0x10,
  SMART: 0x20,
  RUNNING: 0x40,
  SIMPLEX: 0x800,
  MULTICAST: 0x8000,
};

/** One command line of a modelled host tool; undefined when `tool` is not one of them. */
export function runMacosHostTool(
  host: MacosHostModel,
  tool: string,
  argv: readonly string[],
): CommandOutcome | undefined {
  const words = argv.join(' ');
  switch (tool) {
    case 'ifconfig':
      return argv.length === 0 ? ok(renderIfconfig(host)) : usage(tool, words);
    case 'netstat':
      return words === '-rn -f inet' ? ok(renderNetstat(host)) : usage(tool, words);
    case 'route': {
      if (words !== '-n get default') return usage(tool, words);
      const route = host.routes.find((r) => r.destination === 'default');
      if (route === undefined) {
        return {
          exitCode: 1,
          stdout: '',
          stderr: 'route: writing to routing socket: not in table\n',
        };
      }
      return ok(
        [
          '   route to: default',
          'destination: default',
          '       mask: default',
          ...(route.gateway === undefined ? [] : [`    gateway: ${route.gateway}`]),
          `  interface: ${route.interface}`,
          `      flags: <UP,${route.gateway === undefined ? '' : 'GATEWAY,'}DONE,STATIC,PRCLONING,GLOBAL>`,
          ' recvpipe  sendpipe  ssthresh  rtt,msec    rttvar  hopcount      mtu     expire',
          '       0         0         0         0         0         0      1500         0 ',
          '',
        ].join('\n'),
      );
    }
    case 'sw_vers':
      return ok(
        `ProductName:\t\tmacOS\nProductVersion:\t\t${host.productVersion}\nBuildVersion:\t\t${host.buildVersion}\n`,
      );
    case 'uname':
      return words === '-r' ? ok(`${host.darwinRelease}\n`) : usage(tool, words);
    default:
      return undefined;
  }
}

function renderIfconfig(host: MacosHostModel): string {
  const lines: string[] = [];
  for (const i of host.interfaces) {
    const flags = [
      ...(i.up ? ['UP'] : []),
      ...(i.name.startsWith('lo')
        ? ['LOOPBACK']
        : i.name.startsWith('utun')
          ? ['POINTOPOINT']
          : ['BROADCAST', 'SMART']),
      ...(i.up ? ['RUNNING'] : []),
      ...(i.name.startsWith('lo') || i.name.startsWith('utun') ? [] : ['SIMPLEX']),
      'MULTICAST',
    ];
    const value = flags.reduce((sum, f) => sum + (IFF[f] ?? 0), 0);
    lines.push(`${i.name}: flags=${value.toString(16)}<${flags.join(',')}> mtu 1500`);
    for (const address of i.addresses) {
      const prefix = parsePrefix(address);
      const [ip = '', length = '0'] = address.split('/');
      if (prefix?.family === 4) {
        const mask = Number(length) === 0 ? 0 : (0xffffffff << (32 - Number(length))) >>> 0;
        // A utun's far end as facts give it; without one the local address again (`inet A --> A`,
        // as in the hand-written fixture src/facts/fixtures/darwin/ifconfig.txt).
        const far = i.peer ?? (i.name.startsWith('utun') ? ip : undefined);
        const peer = far === undefined ? '' : ` --> ${far}`;
        lines.push(`\tinet ${ip}${peer} netmask 0x${mask.toString(16).padStart(8, '0')}`);
      } else {
        const scope = ip.startsWith('fe80:') ? `%${i.name}` : '';
        lines.push(`\tinet6 ${ip}${scope} prefixlen ${length} `);
      }
    }
    if (!i.name.startsWith('lo') && !i.name.startsWith('utun')) {
      lines.push(`\tstatus: ${i.up ? 'active' : 'inactive'}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

function renderNetstat(host: MacosHostModel): string {
  const row = (d: string, g: string, f: string, n: string) =>
    `${d.padEnd(19)}${g.padEnd(19)}${f.padEnd(16)}${n.padStart(9)}       `;
  const lines = [
    'Routing tables',
    '',
    'Internet:',
    row('Destination', 'Gateway', 'Flags', 'Netif').trimEnd() + ' Expire',
  ];
  host.interfaces.forEach((i, index) => {
    for (const r of host.routes.filter((x) => x.interface === i.name)) {
      if (parsePrefix(r.destination)?.family === 6) continue;
      const gateway = r.gateway ?? `link#${index + 1}`;
      const flags = r.gateway === undefined ? 'UCS' : 'UGSc';
      lines.push(
        row(
          r.destination === 'default' ? 'default' : shortNetwork(r.destination),
          gateway,
          flags,
          r.interface,
        ),
      );
    }
  });
  return `${lines.join('\n')}\n`;
}

/** netstat's short form: trailing zero octets dropped when the length is their natural one. */
function shortNetwork(prefix: string): string {
  const [ip = '', length = '32'] = prefix.split('/');
  const octets = ip.split('.');
  const natural = Number(length) / 8;
  if (Number.isInteger(natural) && natural >= 1 && octets.slice(natural).every((o) => o === '0')) {
    return octets.slice(0, natural).join('.');
  }
  return `${octets.join('.').replace(/(\.0)+$/, '')}/${length}`;
}

function ok(stdout: string): CommandOutcome {
  return { exitCode: 0, stdout, stderr: '' };
}

function usage(tool: string, words: string): CommandOutcome {
  return { exitCode: 64, stdout: '', stderr: `${tool} (macOS model): not modelled: ${words}\n` };
}
