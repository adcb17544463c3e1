import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { EgressguardError } from '../../core/index.js';
import { matchesTunnel, type HostFacts } from '../../facts/index.js';
import type {
  Artifact,
  BoundTunnel,
  Inspector,
  LiveCounter,
  LiveProblem,
  LiveState,
  LiveTunnel,
} from '../backend.js';
import { listChildAnchors, loadPfConfText } from './expand-pf-rules.js';
import { formatPrefix } from './format-pf-rule.js';
import { ANCHOR_ARTIFACT, HASH_LABEL_PREFIXES, SOURCE_TABLE_PREFIX } from './pf-compiler.js';
import { findPfConfStanzas } from './pf-conf-stanza.js';
import type { PfOptions } from './pf-options.js';
import {
  parseReferenceTokens,
  parseShownRules,
  type Pfctl,
  type ShownRule,
} from './pfctl-command.js';
import { readOwnToken } from './pf-token.js';

/** What the anchor file asks for, read from the file itself (parsed as pfctl would). */
export interface DesiredAnchor {
  /** Kernel rules per label, filter and translation rulesets (translation rules carry none). */
  readonly filterLabels: ReadonlyMap<string, number>;
  readonly natRules: number;
  readonly scrubRules: number;
  /** Table name → entries as `pfctl -T show` prints them. */
  readonly tables: ReadonlyMap<string, readonly string[]>;
  /** The class source tables' entries: whose states a change kills. */
  readonly sourcePrefixes: readonly string[];
  /** The interfaces `route-to` sends into (the tunnel classes' tunnels), sorted. */
  readonly routeTo: readonly string[];
}

export function anchorText(artifacts: readonly Artifact[]): string {
  const found = artifacts.find((a) => a.name === ANCHOR_ARTIFACT);
  if (found === undefined) {
    throw new EgressguardError('state-corrupt', `Cannot find artifact "${ANCHOR_ARTIFACT}" for pf`);
  }
  return found.content;
}

/** Parses and expands the anchor file as pfctl would load it (F93 expand_rule). */
export function readDesiredAnchor(text: string, anchor: string): DesiredAnchor {
  const loaded = loadPfConfText(text, {
    file: ANCHOR_ARTIFACT,
    anchorPath: anchor,
    interfaces: new Map(),
  });
  if (loaded.load === null) {
    throw new EgressguardError(
      'state-corrupt',
      `Cannot read the pf anchor file: ${loaded.problems.map((p) => `${p.line}: ${p.message}`).join('; ')}`,
    );
  }
  const filterLabels = new Map<string, number>();
  const routeTo = new Set<string>();
  for (const rule of loaded.load.rulesets.filter) {
    const label = rule.label ?? '';
    filterLabels.set(label, (filterLabels.get(label) ?? 0) + 1);
    if (rule.kind === 'filter' && rule.route?.kind === 'route-to') {
      for (const target of rule.route.targets) routeTo.add(target.interface);
    }
  }
  const tables = new Map<string, string[]>();
  const sourcePrefixes: string[] = [];
  for (const [name, table] of loaded.load.tables) {
    const entries = table.entries.map((e) => `${e.negated ? '!' : ''}${formatPrefix(e.prefix)}`);
    tables.set(name, entries);
    if (name.startsWith(SOURCE_TABLE_PREFIX)) sourcePrefixes.push(...entries);
  }
  return {
    filterLabels,
    natRules: loaded.load.rulesets.nat.length,
    scrubRules: loaded.load.rulesets.scrub.length,
    tables,
    sourcePrefixes,
    routeTo: [...routeTo].sort(),
  };
}

/** Our anchor as pfctl shows it now. */
export interface LiveAnchor {
  readonly exists: boolean;
  readonly filter: readonly ShownRule[];
  readonly nat: readonly ShownRule[];
  readonly hash: string | null;
  /** sha256 of the rule texts, counters left out. */
  readonly fingerprint: string | null;
}

export async function readLiveAnchor(pfctl: Pfctl, anchor: string): Promise<LiveAnchor> {
  const rules = await pfctl.read(['-a', anchor, '-v', '-s', 'rules']);
  if (rules.exitCode !== 0) {
    return { exists: false, filter: [], nat: [], hash: null, fingerprint: null };
  }
  const nat = await pfctl.read(['-a', anchor, '-s', 'nat']);
  const filter = parseShownRules(rules.stdout);
  const translation = nat.exitCode === 0 ? parseShownRules(nat.stdout) : [];
  const halves = HASH_LABEL_PREFIXES.map((prefix) =>
    filter.find((r) => r.label?.startsWith(prefix) === true)?.label?.slice(prefix.length),
  );
  const hash = halves.every((h) => h !== undefined && /^[0-9a-f]{32}$/.test(h))
    ? halves.join('')
    : null;
  const texts = [...filter, ...translation].map((r) => r.text);
  return {
    exists: texts.length > 0,
    filter,
    nat: translation,
    hash,
    fingerprint:
      texts.length === 0 ? null : createHash('sha256').update(texts.join('\n')).digest('hex'),
  };
}

/**
 * Reads our anchor back by labels (`-vsr`, `-sn`, `-T show`), checks it is consulted (reachable
 * from the main ruleset through `anchor`/`nat-anchor` points, pf enabled, our own `-E` reference
 * held), lists siblings evaluated before ours that pass quick (DESIGN.md §4, pf), and reports
 * the tunnel classes' tunnels as `ifconfig` (`readInterfaces`) shows them.
 */
export function createPfInspector(
  pfctl: Pfctl,
  options: PfOptions,
  readInterfaces: () => Promise<HostFacts['interfaces']>,
): Inspector {
  return {
    async read(expected, context) {
      const live = await readLiveAnchor(pfctl, options.anchor);
      const missing: LiveProblem[] = [];
      const unexpected: LiveProblem[] = [];
      const problem = (what: string): LiveProblem => ({ what, waitingFor: null });
      const desired =
        expected === undefined
          ? undefined
          : readDesiredAnchor(anchorText(expected), options.anchor);

      if (desired !== undefined && live.exists) {
        const liveLabels = new Map<string, number>();
        // `-sr` lists the scrub ruleset first (F93 pfctl_show_rules): counted on its own.
        const scrub = live.filter.filter((r) => r.text.startsWith('scrub '));
        if (scrub.length !== desired.scrubRules) {
          (scrub.length < desired.scrubRules ? missing : unexpected).push(
            problem(
              `scrub rules in anchor "${options.anchor}": ${scrub.length} live, ${desired.scrubRules} desired`,
            ),
          );
        }
        for (const rule of live.filter) {
          if (rule.text.startsWith('scrub ')) continue;
          const label = rule.label ?? '';
          liveLabels.set(label, (liveLabels.get(label) ?? 0) + 1);
        }
        for (const [label, count] of desired.filterLabels) {
          const have = liveLabels.get(label) ?? 0;
          if (have < count)
            missing.push(
              problem(
                `${count - have} pf rule(s) labelled "${label}" in anchor "${options.anchor}"`,
              ),
            );
        }
        for (const [label, count] of liveLabels) {
          const want = desired.filterLabels.get(label) ?? 0;
          if (count > want)
            unexpected.push(
              problem(
                `${count - want} pf rule(s) labelled "${label}" in anchor "${options.anchor}"`,
              ),
            );
        }
        if (live.nat.length !== desired.natRules) {
          (live.nat.length < desired.natRules ? missing : unexpected).push(
            problem(
              `nat rules in anchor "${options.anchor}": ${live.nat.length} live, ${desired.natRules} desired`,
            ),
          );
        }
        for (const [name, entries] of desired.tables) {
          const shown = await pfctl.read(['-a', options.anchor, '-t', name, '-T', 'show']);
          const have =
            shown.exitCode === 0
              ? shown.stdout
                  .split('\n')
                  .map((l) => l.trim())
                  .filter((l) => l !== '')
              : [];
          const wanted = new Set(entries);
          const lacking = entries.filter((e) => !have.includes(e));
          const extra = have.filter((e) => !wanted.has(e));
          if (lacking.length > 0)
            missing.push(problem(`table <${name}> entries ${lacking.join(', ')}`));
          if (extra.length > 0)
            unexpected.push(problem(`table <${name}> entries ${extra.join(', ')}`));
        }
      }

      const collisions: string[] = [];
      if (live.exists) {
        missing.push(
          ...(await checkConsulted(pfctl, options, {
            nat: live.nat.length > 0,
            scrub: live.filter.some((r) => r.text.startsWith('scrub ')),
          })),
        );
        collisions.push(...(await quickSiblings(pfctl, options.anchor)));
        missing.push(...(await checkReference(pfctl, options.tokenFile)));
      }

      const counters = new Map<string, { packets: number; bytes: number }>();
      for (const rule of live.filter) {
        if (
          rule.label === null ||
          HASH_LABEL_PREFIXES.some((p) => rule.label?.startsWith(p) === true)
        )
          continue;
        const sum = counters.get(rule.label) ?? { packets: 0, bytes: 0 };
        counters.set(rule.label, {
          packets: sum.packets + rule.packets,
          bytes: sum.bytes + rule.bytes,
        });
      }
      const liveCounters: LiveCounter[] = [...counters].map(([id, c]) => ({ id, ...c }));
      return {
        present: live.exists,
        hash: live.hash,
        fingerprint: live.fingerprint,
        counters: liveCounters,
        missing,
        unexpected,
        collisions,
        tunnels: await readTunnels(
          context?.tunnels ?? bindingsOf(desired?.routeTo ?? []),
          readInterfaces,
        ),
      } satisfies LiveState;
    },
  };
}

/** Without the generation's record of its tunnels (an older one): the anchor's route-to targets. */
function bindingsOf(routeTo: readonly string[]): BoundTunnel[] {
  return routeTo.map((name) => ({ declared: name, interface: name, present: true, match: null }));
}

/**
 * Each tunnel as the host has it now: absent when `ifconfig` does not list it, up with the UP
 * flag; for one found by `match`, the interface that matches now (a renumbered utun is found
 * elsewhere, and the anchor still routes into the old number). Nothing is run without tunnels.
 */
async function readTunnels(
  bound: readonly BoundTunnel[],
  readInterfaces: () => Promise<HostFacts['interfaces']>,
): Promise<LiveTunnel[]> {
  if (bound.length === 0) return [];
  const interfaces = await readInterfaces();
  return bound.map((tunnel): LiveTunnel => {
    const iface = interfaces.find((i) => i.name === tunnel.interface);
    const { match } = tunnel;
    const matching = match === null ? [] : interfaces.filter((i) => matchesTunnel(match, i));
    return {
      name: tunnel.interface,
      state: iface === undefined ? 'absent' : iface.up ? 'up' : 'down',
      declared: tunnel.declared,
      ...(iface === undefined ? {} : { addresses: [...iface.addresses] }),
      ...(iface?.peer === undefined ? {} : { peer: iface.peer }),
      // Two interfaces matching is no interface the tunnel can be said to be on.
      ...(match === null
        ? {}
        : { matchesNow: matching.length === 1 ? (matching[0]?.name ?? null) : null }),
    };
  });
}

/**
 * Loaded is not consulted: pf must be enabled, and the main ruleset must reach our anchor, by
 * name or through a wildcard point on its parent (`anchor "com.apple/*"` in stock pf.conf,
 * NOTES.md §5), for filtering and, when we translate, for NAT, and, when the anchor holds scrub
 * rules, for normalization: without a scrub-anchor point pf never reaches our `scrub … fragment
 * reassemble`, and a fragment is filtered unreassembled, without its ports or our tags (XNU
 * pf_norm.c pf_normalize_ip steps into scrub anchors only from the main scrub ruleset; pf.c
 * pf_test_fragment).
 */
export async function checkConsulted(
  pfctl: Pfctl,
  options: PfOptions,
  needs: { readonly nat: boolean; readonly scrub: boolean },
): Promise<LiveProblem[]> {
  const { anchor } = options;
  const problems: LiveProblem[] = [];
  // A pf.conf stanza of ours attaches the anchor when macOS next loads pf.conf, at boot: nothing
  // egressguard may run attaches it before (never `pfctl -f /etc/pf.conf`, DESIGN.md §1A).
  const until =
    options.attach === 'stanza' && hasOwnStanza(options)
      ? { until: 'the next boot, when macOS loads pf.conf' }
      : {};
  const info = await pfctl.read(['-s', 'info']);
  if (!/Status:\s*Enabled/.test(info.stdout)) {
    problems.push({ what: 'pf is disabled: no rule of ours is consulted', waitingFor: null });
  }
  const points = anchorPoints(anchor);
  const reached = (shown: string, keyword: string): boolean =>
    points.some((p) => shown.includes(`${keyword} "${p}"`));
  const main = await pfctl.read(['-s', 'rules']);
  // `-sr` lists the scrub ruleset first: its anchor points print as `scrub-anchor "P" …` (macOS)
  // or, as F93 print_rule names every scrub anchor, `anchor "P" … fragment reassemble`.
  const lines = main.stdout.split('\n');
  const scrubPoints = lines.filter(
    (l) => l.startsWith('scrub-anchor ') || (l.startsWith('anchor ') && /\bfragment\b/.test(l)),
  );
  const filterPoints = lines.filter((l) => !scrubPoints.includes(l)).join('\n');
  if (needs.scrub && !points.some((p) => scrubPoints.some((l) => l.includes(`anchor "${p}"`)))) {
    problems.push({
      what: `a scrub-anchor point in the main ruleset that reaches "${anchor}" (scrub-anchor "${points.join('" or "')}"): our fragment reassembly is loaded but not consulted, and fragments are filtered without their ports`,
      waitingFor: null,
      ...until,
    });
  }
  if (!reached(filterPoints, 'anchor')) {
    problems.push({
      what: `an anchor point in the main ruleset that reaches "${anchor}" (anchor "${points.join('" or "')}"): our rules are loaded but not consulted`,
      waitingFor: null,
      ...until,
    });
  }
  if (needs.nat) {
    const mainNat = await pfctl.read(['-s', 'nat']);
    if (!reached(mainNat.stdout, 'nat-anchor')) {
      problems.push({
        what: `a nat-anchor point in the main ruleset that reaches "${anchor}": our NAT is loaded but not consulted`,
        waitingFor: null,
        ...until,
      });
    }
  }
  return problems;
}

function hasOwnStanza(options: PfOptions): boolean {
  try {
    return (
      findPfConfStanzas(readFileSync(options.pfConf, 'utf8'), options.anchor).blocks.length > 0
    );
  } catch {
    return false;
  }
}

/** The main-ruleset anchor points that evaluate `anchor`: its own name, or `parent/*`. */
function anchorPoints(anchor: string): string[] {
  const slash = anchor.lastIndexOf('/');
  return slash < 0 ? [anchor] : [anchor, `${anchor.slice(0, slash)}/*`];
}

/** Siblings that sort before ours (evaluated first, pf.conf.5:2562-2565) and hold a pass quick. */
async function quickSiblings(pfctl: Pfctl, anchor: string): Promise<string[]> {
  return (await listEarlierSiblings(pfctl, anchor))
    .filter((s) => s.quick.length > 0)
    .map(
      (s) =>
        `anchor "${s.anchor}" is evaluated before "${anchor}" and passes quick: ${s.quick.join('; ')}`,
    );
}

/** The siblings of `anchor` that sort (and so are evaluated) before it, with their pass-quick rules. */
export async function listEarlierSiblings(
  pfctl: Pfctl,
  anchor: string,
): Promise<{ readonly anchor: string; readonly quick: readonly string[] }[]> {
  const slash = anchor.lastIndexOf('/');
  if (slash < 0) return [];
  const parent = anchor.slice(0, slash);
  const shown = await pfctl.read(['-a', parent, '-s', 'Anchors']);
  if (shown.exitCode !== 0) return [];
  const siblings = listChildAnchors(
    shown.stdout
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== ''),
    parent,
  ).filter((s) => s < anchor);
  const out: { anchor: string; quick: string[] }[] = [];
  for (const sibling of siblings) {
    const rules = await pfctl.read(['-a', sibling, '-s', 'rules']);
    const quick = parseShownRules(rules.stdout).filter((r) => /^pass\b.*\bquick\b/.test(r.text));
    out.push({ anchor: sibling, quick: quick.map((r) => r.text) });
  }
  return out;
}

/** Our `-E` reference: recorded in the token file and listed by `pfctl -s References`. */
async function checkReference(pfctl: Pfctl, tokenFile: string): Promise<LiveProblem[]> {
  const own = readOwnToken(tokenFile);
  const references = await pfctl.read(['-s', 'References']);
  const tokens = parseReferenceTokens(references.stdout);
  if (own === null || !tokens.includes(own.token)) {
    return [
      {
        what: `egressguard's own pf enable reference (pfctl -E, recorded in "${tokenFile}")`,
        waitingFor: null,
      },
    ];
  }
  return [];
}
