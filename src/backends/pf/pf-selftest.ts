import { createSocket } from 'node:dgram';
import { gatherInterfaces, type HostFacts } from '../../facts/index.js';
import type { BackendContext, SelftestCheck, SelftestSupport } from '../backend.js';
import { killClassStates } from './pf-applier.js';
import { parsePfOptions } from './pf-options.js';
import { loadPfConfText } from './expand-pf-rules.js';
import { formatPfRule } from './format-pf-rule.js';
import { parseInterfaceAddresses } from './interface-addresses.js';
import { formatPfConfProblems } from './parse-pf-conf.js';
import { optimizeFilterRuleset } from './pfctl-optimize.js';
import {
  createPfctl,
  parseEnableToken,
  parseReferenceTokens,
  parseShownRules,
  type Pfctl,
} from './pfctl-command.js';

/** A scratch sibling of our anchor: reached through the stock `com.apple/*` hooks, never ours. */
export const SELFTEST_ANCHOR = 'com.apple/251.egressguard-selftest';
const PROBE_PORT = 9; // discard (RFC 863): nothing answers, nothing is harmed

/**
 * The scratch anchor, in the compiled anchor's shapes (pf-compiler.ts): a table, `scrub` in an
 * anchor, NAT to `(if:0)`, labelled filter rules; the host as a list of `(if)`s, `(if:broadcast)`s
 * and `(self)` beside a frozen `self` (one rule per address of this Mac when pfctl loads it); a
 * tagged `route-to lo0` with its backstop; and one unlabelled rule over six addresses, which
 * pfctl's default optimizer merges into a table (pfctl_optimize.c combine_rules). Every address
 * but loopback's is a documentation one (RFC 5737): nothing real matches.
 */
export const SCRATCH = `table <egst_table> { 192.0.2.0/24, 198.51.100.7 }
scrub in on lo0 all fragment reassemble
nat on lo0 inet from 192.0.2.1 to 192.0.2.2 -> (lo0:0)
pass out quick on lo0 inet proto udp from any to 127.0.0.1 port ${PROBE_PORT} keep state label "egst-probe"
block drop in quick on lo0 inet from <egst_table> to 192.0.2.3 label "egst-table"
block drop in quick on lo0 from 192.0.2.1 to self label "egst-self"
block drop in quick on lo0 inet from 192.0.2.1 to { (lo0), (self), 255.255.255.255, (lo0:broadcast), (en0:broadcast) } label "egst-dynamic"
pass in quick on lo0 route-to lo0 inet from 192.0.2.1 to 192.0.2.2 tag EGST keep state (if-bound) label "egst-route"
block drop out quick on ! lo0 all tagged EGST label "egst-backstop"
block drop in quick on lo0 inet proto tcp from 192.0.2.9 to { 192.0.2.10, 192.0.2.11, 192.0.2.12, 192.0.2.13, 192.0.2.14, 192.0.2.15 } port ${PROBE_PORT}
`;
/**
 * A class lockdown of the scratch "class" 127.0.0.1 (pf-compiler.ts: the source table rides
 * along for the applier, which kills its states once the lockdown is in).
 */
const LOCKDOWN = `table <egsrc_egst> { 127.0.0.1 }
block drop out quick on lo0 inet proto udp from any to 127.0.0.1 port ${PROBE_PORT} label "egst-lockdown"
`;
const BROKEN = 'pass out quick on lo0 inet proto udp from any to any port nonsense label "egst"\n';
/** A tunnel class's route-to rule (pf-compiler.ts), to an interface given; only ever `-n`. */
const routeTo = (target: string): string =>
  `pass in quick on lo0 route-to ${target} inet from 192.0.2.1 to 192.0.2.2 tag EGST keep state (if-bound) label "egst-route"\n`;
/** A name no interface has (no driver makes `egst…` interfaces). */
const ABSENT_INTERFACE = 'egst-absent0';

/** Sends one UDP datagram to 127.0.0.1:9, so the scratch anchor's probe rule sees a packet. */
export type SendProbe = () => Promise<void>;

/** This Mac's interfaces and addresses, as `ifconfig` shows them (for the model's prediction). */
export type ReadInterfaces = (context: BackendContext) => Promise<HostFacts['interfaces']>;

function sendLoopbackProbe(): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = createSocket('udp4');
    socket.send(Buffer.from('egressguard selftest'), PROBE_PORT, '127.0.0.1', (error) => {
      socket.close();
      if (error) reject(error);
      else resolve();
    });
  });
}

/**
 * `egressguard selftest --backend pf` on a real Mac: the pfctl model's assumptions the backend
 * relies on, checked against the real pfctl in a scratch anchor that is removed at the end
 * (docs/macos.md, "What is verified only on a model"). Every call goes through the runner.
 */
export function createPfSelftest(
  options: { sendProbe?: SendProbe; readInterfaces?: ReadInterfaces } = {},
): SelftestSupport {
  return {
    description:
      'validate, load rules of the compiled shape into a scratch anchor, read back and compare with the model, counters, a lockdown killing a state, reference count, remove',
    run: (context) =>
      runPfSelftest(
        context,
        options.sendProbe ?? sendLoopbackProbe,
        options.readInterfaces ?? ((c) => gatherInterfaces(c.runner, { os: 'darwin' })),
      ),
  };
}

type Check = (
  name: string,
  ok: boolean,
  detail: string,
  assumption: string | null,
  cannotTell?: string,
) => void;

async function runPfSelftest(
  context: BackendContext,
  sendProbe: SendProbe,
  readInterfaces: ReadInterfaces,
): Promise<SelftestCheck[]> {
  const pfctl = createPfctl(context.runner, parsePfOptions(context.options));
  const checks: SelftestCheck[] = [];
  const check: Check = (name, ok, detail, assumption, cannotTell) => {
    checks.push({
      name,
      ok: ok && cannotTell === undefined,
      detail,
      assumption,
      ...(cannotTell === undefined ? {} : { cannotTell }),
    });
  };
  const A = SELFTEST_ANCHOR;
  const shownRules = async (): Promise<string> =>
    (await pfctl.read(['-a', A, '-v', '-s', 'rules'])).stdout;

  try {
    const before = await pfctl.read(['-a', A, '-s', 'rules']);
    const validated = await pfctl.read(['-n', '-a', A, '-f', '-'], SCRATCH);
    const after = await pfctl.read(['-a', A, '-s', 'rules']);
    check(
      'validate',
      validated.exitCode === 0 && after.stdout === before.stdout,
      `pfctl -n -a ${A} -f - exited ${validated.exitCode}; the anchor ${after.stdout === before.stdout ? 'is unchanged' : 'CHANGED'}`,
      'pfctl -n -a ANCHOR -f FILE parses the file and touches no kernel state (NOTES.md §2)',
    );
    const rejected = await pfctl.read(['-n', '-a', A, '-f', '-'], BROKEN);
    check(
      'validate rejects',
      rejected.exitCode !== 0,
      `a broken file: exit ${rejected.exitCode}`,
      'pfctl -n exits non-zero on a file it cannot parse',
    );

    await checkRouteTo((text) => pfctl.read(['-n', '-a', A, '-f', '-'], text), check);

    const loaded = await pfctl.tryChange(['-a', A, '-f', '-'], SCRATCH);
    check(
      'load',
      loaded.exitCode === 0,
      `pfctl -a ${A} -f - exited ${loaded.exitCode}${loaded.exitCode === 0 ? '' : `: ${loaded.stderr.trim()}`}`,
      'an anchor file with tables, nat and filter rules loads alone under com.apple/* (NOTES.md §5)',
    );

    const shown = await shownRules();
    const rules = parseShownRules(shown);
    const labels = rules.map((r) => r.label);
    const wanted = [
      'egst-probe',
      'egst-table',
      'egst-self',
      'egst-dynamic',
      'egst-route',
      'egst-backstop',
    ];
    check(
      'read back rules',
      wanted.every((l) => labels.includes(l)),
      `labels shown: ${[...new Set(labels.filter((l) => l !== null))].join(', ') || 'none'}`,
      '-vsr prints each rule with its label and a counters line (F93 print_rule)',
    );
    check(
      'scrub in an anchor',
      /^scrub in on lo0 all\b.*fragment reassemble/m.test(shown),
      shown.split('\n').find((l) => l.startsWith('scrub')) ?? 'no scrub rule shown',
      'an anchor holds scrub rules, which -sr lists first (F93 pfctl_show_rules)',
    );
    await compareWithModel(context, readInterfaces, shown, check);
    const nat = await pfctl.read(['-a', A, '-s', 'nat']);
    check(
      'read back nat',
      /^nat on lo0 inet from 192\.0\.2\.1 to 192\.0\.2\.2 -> \(lo0:0\)/m.test(nat.stdout),
      nat.stdout.trim() || 'nothing shown',
      '-sn prints `nat on IF inet from A to B -> (IF:0)` as the model does, with no pool type (one address)',
    );
    const table = await pfctl.read(['-a', A, '-t', 'egst_table', '-T', 'show']);
    const entries = table.stdout
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== '');
    check(
      'read back table',
      entries.join(' ') === '192.0.2.0/24 198.51.100.7',
      `-T show: ${entries.join(', ') || 'nothing'}`,
      '-T show lists a table of an anchor, one entry a line, hosts without /32',
    );
    const parent = await pfctl.read(['-a', 'com.apple', '-s', 'Anchors']);
    check(
      'anchor listed',
      parent.stdout.split('\n').some((l) => l.trim() === A),
      `-a com.apple -s Anchors lists ${parent.stdout.split('\n').filter((l) => l.trim() !== '').length} anchors`,
      '-s Anchors lists the children of an anchor by full path',
    );
    const main = await pfctl.read(['-s', 'rules']);
    check(
      'consulted',
      main.stdout.includes('anchor "com.apple/*"'),
      'the main ruleset holds anchor "com.apple/*"',
      'stock macOS evaluates anchor "com.apple/*" (NOTES.md §5)',
    );

    const probeBefore = parseShownRules(await shownRules()).find((r) => r.label === 'egst-probe');
    await sendProbe();
    const probeAfter = parseShownRules(await shownRules()).find((r) => r.label === 'egst-probe');
    const moved =
      (probeAfter?.packets ?? 0) > (probeBefore?.packets ?? 0) &&
      (probeAfter?.evaluations ?? 0) > (probeBefore?.evaluations ?? 0);
    // `set skip on lo0` (some pf.conf files have it) keeps pf off loopback altogether: the probe
    // is then never filtered, on a Mac where everything else is as the model says.
    const interfaces = await pfctl.read(['-s', 'Interfaces', '-v']);
    const loSkipped = /^lo0 \(skip\)/m.test(interfaces.stdout);
    check(
      'counters move',
      moved,
      `egst-probe: evaluations ${probeBefore?.evaluations ?? '?'} → ${probeAfter?.evaluations ?? '?'}, packets ${probeBefore?.packets ?? '?'} → ${probeAfter?.packets ?? '?'}`,
      'a rule in a com.apple/* sub-anchor is evaluated, and -vsr Evaluations/Packets count it',
      moved || !loSkipped
        ? undefined
        : 'pf skips lo0 here (`set skip on lo0`, -s Interfaces -v shows "lo0 (skip)"): the loopback probe is never filtered',
    );
    await checkLockdownKills(
      pfctl,
      sendProbe,
      moved ? undefined : 'no probe reached the scratch anchor (see "counters move")',
      check,
    );

    await checkReferences(pfctl, check);
  } finally {
    const flushed = await pfctl.tryChange(['-a', A, '-F', 'all']);
    const left = await pfctl.read(['-a', A, '-s', 'rules']);
    check(
      'remove',
      flushed.exitCode === 0 && left.stdout.trim() === '',
      `pfctl -a ${A} -F all exited ${flushed.exitCode}; ${left.stdout.trim() === '' ? 'nothing left' : 'rules LEFT'}`,
      '-a ANCHOR -F all empties that anchor alone',
    );
  }
  return checks;
}

/**
 * The route-to forms the compiler relies on, under `-n` only (nothing is loaded): the bare
 * `route-to IF` parses, `(IF)` without an address does not (parse.y route_host: `STRING |
 * '(' STRING host ')'`), and an interface the host lacks is refused while parsing, as parse.y
 * 1.291/1.449 do and F93's no longer does (docs/macos.md, "route-to and pfctl's grammar"). If
 * the last fails, macOS loads an anchor naming an absent utun: the model is only stricter.
 */
async function checkRouteTo(
  validate: (text: string) => Promise<{ exitCode: number; stderr: string }>,
  check: Check,
): Promise<void> {
  const bare = await validate(routeTo('lo0'));
  check(
    'route-to accepted',
    bare.exitCode === 0,
    `route-to lo0: exit ${bare.exitCode}${bare.exitCode === 0 ? '' : `: ${bare.stderr.trim()}`}`,
    'the bare `route-to IF` of a tunnel class parses (parse.y route_host: STRING)',
  );
  const parenthesised = await validate(routeTo('(lo0)'));
  check(
    'route-to (if) refused',
    parenthesised.exitCode !== 0,
    `route-to (lo0): exit ${parenthesised.exitCode}`,
    "`route-to (IF)` without an address is a syntax error (parse.y route_host: '(' STRING host ')')",
  );
  const unknown = await validate(routeTo(ABSENT_INTERFACE));
  const refused =
    unknown.exitCode !== 0 && unknown.stderr.includes(`unknown interface ${ABSENT_INTERFACE}`);
  check(
    'route-to unknown refused',
    refused,
    `route-to ${ABSENT_INTERFACE}: exit ${unknown.exitCode}${unknown.stderr.trim() === '' ? '' : `: ${unknown.stderr.trim()}`}`,
    'a route-to interface the host lacks is refused at -n ("routeto: unknown interface", parse.y 1.449 ifa_exists), so the compiler emits none for an absent tunnel',
    // Accepted is what F93's parse.y does (it no longer checks): a correct pfctl either way, for
    // which the compiler's kill-switch-only compile of an absent tunnel is stricter than needed.
    refused || unknown.exitCode !== 0
      ? undefined
      : "this pfctl accepts a route-to interface the host lacks, as FreeBSD 9.3's parse.y does: the model is stricter here, which only makes the compiler leave an absent tunnel's route-to out",
  );
}

/**
 * The rules `pfctl -a ANCHOR -vsr` shows (scrub, then filter) after loading `text` into an anchor
 * on a Mac with these interfaces, as the pfctl model loads it: `self` and lists expanded and
 * frozen at load (expand-pf-rules.ts), then pfctl's default optimizer (pfctl-optimize.ts).
 * The pfctl model's `-a ANCHOR -f -` and `-vsr` print the same rules (its tests say so).
 */
export function predictShownRules(
  text: string,
  anchor: string,
  interfaces: Readonly<Record<string, readonly string[]>>,
): { rules: string } | { problems: string } {
  const loaded = loadPfConfText(text, {
    file: 'stdin',
    anchorPath: anchor,
    interfaces: parseInterfaceAddresses(interfaces),
    interfacesComplete: true,
  });
  if (loaded.load === null) return { problems: formatPfConfProblems(loaded.problems) };
  const { rulesets } = optimizeFilterRuleset(loaded.load.rulesets, {
    noAction: false,
    counter: { next: 0 },
  });
  const shown = [...rulesets.scrub, ...rulesets.filter].map((r) => `${formatPfRule(r)}\n`);
  return { rules: shown.join('') };
}

/**
 * `pfctl -vsr` of the scratch anchor against what the pfctl model predicts for this Mac
 * (predictShownRules, with this Mac's interfaces): the rule count per label must match.
 */
async function compareWithModel(
  context: BackendContext,
  readInterfaces: ReadInterfaces,
  shown: string,
  check: Check,
): Promise<void> {
  const assumption =
    'pfctl keeps one rule per address of `self` and per item of a list, keeps `(if)` as one, and its default optimizer merges unlabelled rules only (the model predicts the count per label)';
  let interfaces: HostFacts['interfaces'];
  try {
    interfaces = await readInterfaces(context);
  } catch (error) {
    check(
      'counts as the model predicts',
      false,
      'no prediction',
      assumption,
      `cannot read this Mac's interfaces: ${(error as Error).message}`,
    );
    return;
  }
  const predicted = predictShownRules(
    SCRATCH,
    SELFTEST_ANCHOR,
    Object.fromEntries(interfaces.map((i) => [i.name, i.addresses])),
  );
  if ('problems' in predicted) {
    check(
      'counts as the model predicts',
      false,
      `the model refuses the scratch anchor: ${predicted.problems.trim()}`,
      assumption,
    );
    return;
  }
  const count = (text: string): Map<string, number> => {
    const counts = new Map<string, number>();
    for (const rule of parseShownRules(text)) {
      const key = rule.text.startsWith('scrub') ? '(scrub)' : (rule.label ?? '(unlabelled)');
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }
    return counts;
  };
  const model = count(predicted.rules);
  const live = count(shown);
  const keys = [...new Set([...model.keys(), ...live.keys()])].sort();
  const differing = keys.filter((k) => model.get(k) !== live.get(k));
  check(
    'counts as the model predicts',
    differing.length === 0,
    keys
      .map(
        (k) =>
          `${k} ${live.get(k) ?? 0}${model.get(k) === live.get(k) ? '' : ` (model: ${model.get(k) ?? 0})`}`,
      )
      .join(', '),
    assumption,
  );
}

/**
 * A state opened by the probe on lo0 is killed when a lockdown naming its source loads, as the
 * applier's lockdown does (pf-applier.ts killClassStates: `pfctl -k` per `egsrc_` entry): the
 * loopback states from 127.0.0.1 go (stock macOS keeps none but the probe's).
 */
async function checkLockdownKills(
  pfctl: Pfctl,
  sendProbe: SendProbe,
  noProbe: string | undefined,
  check: Check,
): Promise<void> {
  const assumption =
    'pfctl -k SOURCE kills the states a class opened (floating, either direction), so a lockdown stops established flows (pf.conf(5) STATEFUL FILTERING)';
  const probeStates = async (): Promise<number> =>
    (await pfctl.read(['-s', 'states'])).stdout
      .split('\n')
      .filter((l) => /\budp\b/.test(l) && l.includes(`127.0.0.1:${PROBE_PORT}`)).length;
  await sendProbe();
  const opened = await probeStates();
  if (opened === 0) {
    check(
      'lockdown kills states',
      false,
      'the probe opened no state on lo0',
      assumption,
      noProbe ?? 'the probe opened no state on lo0 to kill',
    );
    return;
  }
  const loaded = await pfctl.tryChange(['-a', SELFTEST_ANCHOR, '-f', '-'], LOCKDOWN);
  await killClassStates(pfctl, LOCKDOWN, SELFTEST_ANCHOR);
  const left = await probeStates();
  check(
    'lockdown kills states',
    loaded.exitCode === 0 && left === 0,
    `lockdown load exited ${loaded.exitCode}; probe states ${opened} → ${left}`,
    assumption,
  );
}

async function checkReferences(pfctl: Pfctl, check: Check): Promise<void> {
  const before = parseReferenceTokens((await pfctl.read(['-s', 'References'])).stdout);
  const enabled = await pfctl.tryChange(['-E']);
  const token = parseEnableToken(enabled);
  const during = parseReferenceTokens((await pfctl.read(['-s', 'References'])).stdout);
  check(
    'take a reference',
    token !== null && during.includes(token) && during.length === before.length + 1,
    `pfctl -E printed ${token === null ? 'no token' : `token ${token}`}; references ${before.length} → ${during.length}`,
    '-E prints "Token : N" and -s References lists that token (NOTES.md §3)',
  );
  if (token === null) return;
  const released = await pfctl.tryChange(['-X', token]);
  const after = parseReferenceTokens((await pfctl.read(['-s', 'References'])).stdout);
  check(
    'release the reference',
    released.exitCode === 0 && !after.includes(token) && after.length === before.length,
    `pfctl -X ${token} exited ${released.exitCode}; references ${during.length} → ${after.length}`,
    '-X TOKEN releases exactly that reference (NOTES.md §3)',
  );
}
