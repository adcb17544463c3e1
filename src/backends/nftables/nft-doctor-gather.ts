import { existsSync, readdirSync, readFileSync } from 'node:fs';
import type { CommandResult, Runner } from '../../runner/index.js';
import { NETWORKD_DROP_IN_DIRS, orderNetworkdConfig } from './nft-doctor-networkd.js';
import type { DoctorSnapshot, NetworkdState, TcFilterListing } from './nft-doctor-snapshot.js';

/**
 * Reads what doctor diagnoses, through the runner (so `--netns` reads the namespace) and only
 * with listings: nft state only through `nft -j -t list ruleset`, ~20 ms even with 1M set
 * elements, where every other listing costs about a second at 100k.
 */
export async function readDoctorSnapshot(
  runner: Runner,
  options: { readonly networkd: boolean },
): Promise<DoctorSnapshot> {
  const json = async (argv: readonly string[]): Promise<unknown> =>
    JSON.parse((await runner.run(argv, { effect: 'read' })).stdout || '[]') as unknown;
  // IPv6 may be disabled, which some listings report as a failure: read nothing then.
  const jsonOrEmpty = async (argv: readonly string[]): Promise<unknown> => {
    const result = await tryRun(runner, argv);
    return result?.exitCode === 0 ? (JSON.parse(result.stdout || '[]') as unknown) : [];
  };
  const [
    ruleset,
    rules4,
    rules6,
    routes4,
    routes6,
    links,
    tcFilters,
    xfrm,
    brNf,
    legacy4,
    legacy6,
  ] = await Promise.all([
    json(['nft', '-j', '-t', 'list', 'ruleset']),
    json(['ip', '-N', '-j', '-4', 'rule', 'show']),
    jsonOrEmpty(['ip', '-N', '-j', '-6', 'rule', 'show']),
    json(['ip', '-N', '-j', '-4', 'route', 'show', 'table', 'all']),
    jsonOrEmpty(['ip', '-N', '-j', '-6', 'route', 'show', 'table', 'all']),
    json(['ip', '-j', '-d', 'link', 'show']),
    readTcFilters(runner),
    tryRun(runner, ['ip', 'xfrm', 'policy', 'show']),
    tryRun(runner, ['sysctl', '-n', 'net.bridge.bridge-nf-call-iptables']),
    tryRun(runner, ['cat', '/proc/net/ip_tables_names']),
    tryRun(runner, ['cat', '/proc/net/ip6_tables_names']),
  ]);
  const names = (r: CommandResult | undefined): string[] =>
    r?.exitCode === 0 ? r.stdout.split('\n').filter((n) => n.trim() !== '') : [];
  return {
    ruleset,
    rules: { 4: rules4, 6: rules6 },
    routes: { 4: routes4, 6: routes6 },
    links,
    tcFilters,
    xfrmPolicies: xfrm?.exitCode === 0 ? xfrm.stdout : null,
    bridgeNetfilter: brNf?.exitCode === 0 ? brNf.stdout.trim() === '1' : null,
    legacyIptables: { 4: names(legacy4), 6: names(legacy6) },
    networkd: options.networkd ? readNetworkdState() : null,
  };
}

/** tc filters on every device with an ingress or clsact qdisc; null when tc is not installed. */
async function readTcFilters(runner: Runner): Promise<TcFilterListing[] | null> {
  const qdiscs = await tryRun(runner, ['tc', '-j', 'qdisc', 'show']);
  if (qdiscs?.exitCode !== 0) return null;
  const listings: TcFilterListing[] = [];
  for (const q of JSON.parse(qdiscs.stdout || '[]') as { kind?: string; dev?: string }[]) {
    if (q.dev === undefined || (q.kind !== 'clsact' && q.kind !== 'ingress')) continue;
    const directions =
      q.kind === 'clsact' ? (['ingress', 'egress'] as const) : (['ingress'] as const);
    for (const direction of directions) {
      const out = await runner.run(['tc', '-j', 'filter', 'show', 'dev', q.dev, direction], {
        effect: 'read',
      });
      listings.push({ dev: q.dev, direction, filters: JSON.parse(out.stdout || '[]') as unknown });
    }
  }
  return listings;
}

/** A listing that may be missing (tool not installed, module not loaded): undefined then. */
async function tryRun(runner: Runner, argv: readonly string[]): Promise<CommandResult | undefined> {
  try {
    return await runner.run(argv, { effect: 'read', allowFailure: true });
  } catch {
    return undefined; // the runner throws when the command cannot be started at all
  }
}

/**
 * systemd-networkd of the machine itself (it never manages other namespaces): running if a
 * process is, enabled if a target wants it, and its configuration in the order systemd reads it.
 */
function readNetworkdState(): NetworkdState {
  // /run/systemd/netif itself exists wherever the package is installed (tmpfiles); per-link
  // state files in it are written only by a running networkd.
  const running =
    readdirSafe('/run/systemd/netif/links').length > 0 ||
    readdirSafe('/proc').some(
      (pid) => /^\d+$/.test(pid) && readSafe(`/proc/${pid}/comm`)?.trim() === 'systemd-network', // comm is cut at 15
    );
  const enabled = readdirSafe('/etc/systemd/system').some(
    (dir) =>
      dir.endsWith('.wants') && existsSync(`/etc/systemd/system/${dir}/systemd-networkd.service`),
  );
  const mainFile = [
    '/etc/systemd/networkd.conf',
    '/run/systemd/networkd.conf',
    '/usr/lib/systemd/networkd.conf',
  ].find((f) => existsSync(f));
  const dropIns = NETWORKD_DROP_IN_DIRS.flatMap((dir) =>
    readdirSafe(dir).map((name) => ({ dir, name })),
  );
  const files = orderNetworkdConfig(mainFile, dropIns).flatMap((path) => {
    const text = readSafe(path);
    return text === undefined ? [] : [{ path, text }];
  });
  return { running, enabled, files };
}

function readdirSafe(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

function readSafe(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}
