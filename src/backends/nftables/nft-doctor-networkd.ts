import type { DoctorFinding, NetworkdState, SteeringRange } from './nft-doctor-snapshot.js';

/** The drop-in egressguard asks for: networkd then leaves our routing rules alone. */
export const NETWORKD_DROP_IN = {
  path: '/etc/systemd/networkd.conf.d/egressguard.conf',
  content: '[Network]\nManageForeignRoutingPolicyRules=no\n',
} as const;

/** Where systemd looks for networkd.conf drop-ins, most important first (systemd.syntax(7)). */
export const NETWORKD_DROP_IN_DIRS = [
  '/etc/systemd/networkd.conf.d',
  '/run/systemd/networkd.conf.d',
  '/usr/local/lib/systemd/networkd.conf.d',
  '/usr/lib/systemd/networkd.conf.d',
] as const;

/**
 * The order systemd parses networkd's configuration: the main file, then every `*.conf` drop-in
 * sorted by file name, where a name in a more important directory masks the same name in a less
 * important one. Later assignments win.
 */
export function orderNetworkdConfig(
  mainFile: string | undefined,
  dropIns: readonly { readonly dir: string; readonly name: string }[],
): string[] {
  const chosen = new Map<string, { dir: string; rank: number }>();
  for (const { dir, name } of dropIns) {
    if (!name.endsWith('.conf')) continue;
    const rank = (NETWORKD_DROP_IN_DIRS as readonly string[]).indexOf(dir);
    const known = chosen.get(name);
    if (known === undefined || (rank !== -1 && (known.rank === -1 || rank < known.rank))) {
      chosen.set(name, { dir, rank });
    }
  }
  const sorted = [...chosen.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return [
    ...(mainFile === undefined ? [] : [mainFile]),
    ...sorted.map(([name, { dir }]) => `${dir}/${name}`),
  ];
}

/**
 * The value of a `[Network]` boolean after every file, parsed like systemd (later assignments
 * win; an invalid value is ignored); undefined when nothing sets it.
 */
export function readNetworkdBoolean(
  files: NetworkdState['files'],
  key: string,
): boolean | undefined {
  let value: boolean | undefined;
  for (const { text } of files) {
    let section = '';
    for (const raw of text.split('\n')) {
      const line = raw.trim();
      if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
      const header = /^\[(.+)\]$/.exec(line);
      if (header?.[1] !== undefined) {
        section = header[1].trim();
        continue;
      }
      if (section !== 'Network') continue;
      const eq = line.indexOf('=');
      if (eq === -1 || line.slice(0, eq).trim() !== key) continue;
      const parsed = parseBoolean(line.slice(eq + 1).trim());
      if (parsed !== undefined) value = parsed;
    }
  }
  return value;
}

function parseBoolean(text: string): boolean | undefined {
  const t = text.toLowerCase();
  if (['1', 'yes', 'y', 'true', 't', 'on'].includes(t)) return true;
  if (['0', 'no', 'n', 'false', 'f', 'off'].includes(t)) return false;
  return undefined;
}

/**
 * systemd-networkd deletes routing rules it did not create (ManageForeignRoutingPolicyRules=yes,
 * the default) whenever it configures a link: our steering rules would vanish.
 */
export function classifyNetworkd(state: NetworkdState, steering: SteeringRange): DoctorFinding[] {
  if (!state.running && !state.enabled) return [];
  const setting = readNetworkdBoolean(state.files, 'ManageForeignRoutingPolicyRules');
  if (setting === false) return [];
  const status = state.running ? 'is running' : 'is enabled';
  return [
    {
      severity: steering.inUse === false ? 'info' : 'warning',
      area: 'networkd',
      code: 'networkd-foreign-rules',
      message: `systemd-networkd ${status} with ManageForeignRoutingPolicyRules=yes${setting === undefined ? ' (the default)' : ''}: it deletes routing rules it did not create, egressguard's steering rules included, whenever it configures a link${steering.inUse === false ? ' (the policy has no tunnel class, so there are none yet)' : ''}`,
      hint: `ship this drop-in as ${NETWORKD_DROP_IN.path}, then \`systemctl restart systemd-networkd\`:\n${NETWORKD_DROP_IN.content}`,
    },
  ];
}
