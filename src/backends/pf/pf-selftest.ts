import { createSocket } from 'node:dgram';
import type { BackendContext, SelftestCheck, SelftestSupport } from '../backend.js';
import { parsePfOptions } from './pf-options.js';
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

/** The scratch anchor: a table, a NAT rule that matches nothing real, and labelled filter rules. */
const SCRATCH = `table <egst_table> { 192.0.2.0/24, 198.51.100.7 }
nat on lo0 inet from 192.0.2.1 to 192.0.2.2 -> (lo0)
pass out quick on lo0 inet proto udp from any to 127.0.0.1 port ${PROBE_PORT} keep state label "egst-probe"
block drop in quick on lo0 inet from <egst_table> to 192.0.2.3 label "egst-table"
`;
const BROKEN = 'pass out quick on lo0 inet proto udp from any to any port nonsense label "egst"\n';
/** A tunnel class's route-to rule (pf-compiler.ts), to an interface given; only ever `-n`. */
const routeTo = (target: string): string =>
  `pass in quick on lo0 route-to ${target} inet from 192.0.2.1 to 192.0.2.2 tag EGST keep state (if-bound) label "egst-route"\n`;
/** A name no interface has (no driver makes `egst…` interfaces). */
const ABSENT_INTERFACE = 'egst-absent0';

/** Sends one UDP datagram to 127.0.0.1:9, so the scratch anchor's probe rule sees a packet. */
export type SendProbe = () => Promise<void>;

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
export function createPfSelftest(options: { sendProbe?: SendProbe } = {}): SelftestSupport {
  return {
    description:
      'validate, load into a scratch anchor, read back, counters, reference count, remove',
    run: (context) => runPfSelftest(context, options.sendProbe ?? sendLoopbackProbe),
  };
}

async function runPfSelftest(
  context: BackendContext,
  sendProbe: SendProbe,
): Promise<SelftestCheck[]> {
  const pfctl = createPfctl(context.runner, parsePfOptions(context.options));
  const checks: SelftestCheck[] = [];
  const check = (name: string, ok: boolean, detail: string, assumption: string | null): void => {
    checks.push({ name, ok, detail, assumption });
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

    const rules = parseShownRules(await shownRules());
    const labels = rules.map((r) => r.label);
    check(
      'read back rules',
      labels.includes('egst-probe') && labels.includes('egst-table'),
      `labels shown: ${labels.filter((l) => l !== null).join(', ') || 'none'}`,
      '-vsr prints each rule with its label and a counters line (F93 print_rule)',
    );
    const nat = await pfctl.read(['-a', A, '-s', 'nat']);
    check(
      'read back nat',
      /^nat on lo0 inet from 192\.0\.2\.1 to 192\.0\.2\.2 -> \(lo0\)/m.test(nat.stdout),
      nat.stdout.trim() || 'nothing shown',
      '-sn prints `nat on IF inet from A to B -> (IF)` as the model does',
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
    check(
      'counters move',
      (probeAfter?.packets ?? 0) > (probeBefore?.packets ?? 0) &&
        (probeAfter?.evaluations ?? 0) > (probeBefore?.evaluations ?? 0),
      `egst-probe: evaluations ${probeBefore?.evaluations ?? '?'} → ${probeAfter?.evaluations ?? '?'}, packets ${probeBefore?.packets ?? '?'} → ${probeAfter?.packets ?? '?'}`,
      'a rule in a com.apple/* sub-anchor is evaluated, and -vsr Evaluations/Packets count it',
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
  check: (name: string, ok: boolean, detail: string, assumption: string | null) => void,
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
  check(
    'route-to unknown refused',
    unknown.exitCode !== 0 && unknown.stderr.includes(`unknown interface ${ABSENT_INTERFACE}`),
    `route-to ${ABSENT_INTERFACE}: exit ${unknown.exitCode}${unknown.stderr.trim() === '' ? '' : `: ${unknown.stderr.trim()}`}`,
    'a route-to interface the host lacks is refused at -n ("routeto: unknown interface", parse.y 1.449 ifa_exists), so the compiler emits none for an absent tunnel',
  );
}

async function checkReferences(
  pfctl: Pfctl,
  check: (name: string, ok: boolean, detail: string, assumption: string | null) => void,
): Promise<void> {
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
