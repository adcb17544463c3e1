import { readFileSync } from 'node:fs';
import type { DoctorFinding, DoctorSupport } from '../backend.js';
import { formatPfConfProblems, parsePfConf } from './parse-pf-conf.js';
import { findPfConfStanzas } from './pf-conf-stanza.js';
import { listEarlierSiblings } from './pf-inspector.js';
import { parsePfOptions, type PfOptions } from './pf-options.js';
import { readOwnToken } from './pf-token.js';
import { createPfctl } from './pfctl-command.js';

/** Everything pf's doctor reads, as pfctl prints it; pf.conf as text (null: unreadable). */
export interface PfDoctorSnapshot {
  /** `pfctl -s info`. */
  readonly info: string;
  /** `pfctl -s References`. */
  readonly references: string;
  /** `pfctl -s rules` and `-s nat` of the main ruleset. */
  readonly mainRules: string;
  readonly mainNat: string;
  /** `pfctl -a ANCHOR -s nat`: our anchor's translation rules (a missing nat-anchor matters then). */
  readonly anchorNat: string;
  /** `pfctl -a ANCHOR -s rules`: its scrub rules need a scrub-anchor point (absent: not read). */
  readonly anchorRules?: string;
  /** Siblings of our anchor that sort before it, with their `pass … quick` rules. */
  readonly earlierSiblings: readonly {
    readonly anchor: string;
    readonly quick: readonly string[];
  }[];
  readonly ownToken: string | null;
  readonly pfConf: string | null;
  /** The host's interfaces as `ifconfig` shows them now (absent: not checked). */
  readonly interfaces?: readonly { readonly name: string; readonly addresses: readonly string[] }[];
}

const AREAS = [
  { id: 'pf', title: 'pf' },
  { id: 'attachment', title: 'How pf reaches our anchor' },
  { id: 'siblings', title: 'Anchors evaluated before ours' },
  { id: 'internet-sharing', title: 'Internet Sharing (vmnet shared network)' },
  { id: 'pf-conf', title: 'pf.conf' },
] as const;

/**
 * `doctor` on macOS (DESIGN.md §4, pf): whether pf is enabled and by whom, whether the main
 * ruleset reaches our anchor (the stock `anchor`/`nat-anchor "com.apple/*"` hooks, or our pf.conf
 * stanza), siblings evaluated first that `pass quick`, Internet Sharing's NAT anchor, and
 * pf.conf's duplicated or unmarked stanzas (the seed incident, DESIGN.md §1A).
 */
export const pfDoctor: DoctorSupport = {
  description:
    'pf enabled and its references, the attachment of our anchor (com.apple/* hooks or our pf.conf stanza), earlier siblings that pass quick, Internet Sharing NAT, pf.conf stanzas',
  async diagnose(input) {
    const options = parsePfOptions(input.options);
    const pfctl = createPfctl(input.runner, options);
    const show = async (args: string[]) => (await pfctl.read(args)).stdout;
    const [info, references, mainRules, mainNat, anchorNat, anchorRules, earlierSiblings] =
      await Promise.all([
        show(['-s', 'info']),
        show(['-s', 'References']),
        show(['-s', 'rules']),
        show(['-s', 'nat']),
        show(['-a', options.anchor, '-s', 'nat']),
        show(['-a', options.anchor, '-s', 'rules']),
        listEarlierSiblings(pfctl, options.anchor),
      ]);
    let pfConf: string | null;
    try {
      pfConf = readFileSync(options.pfConf, 'utf8');
    } catch {
      pfConf = null;
    }
    return diagnosePf(
      {
        info,
        references,
        mainRules,
        mainNat,
        anchorNat,
        anchorRules,
        earlierSiblings,
        ownToken: readOwnToken(options.tokenFile)?.token ?? null,
        pfConf,
        interfaces: input.facts.interfaces,
      },
      options,
    );
  },
};

/** Pure: the report for a snapshot. */
export function diagnosePf(snapshot: PfDoctorSnapshot, options: PfOptions) {
  const findings: DoctorFinding[] = [];
  const add = (f: DoctorFinding) => findings.push(f);
  const { anchor } = options;

  const enabled = /^Status: Enabled\b/m.test(snapshot.info);
  const holders = parseReferences(snapshot.references);
  const ours = holders.find((h) => h.token === snapshot.ownToken);
  if (!enabled) {
    add({
      severity: 'error',
      area: 'pf',
      code: 'pf-disabled',
      message: 'pf is disabled: nothing in any anchor is enforced',
      hint: "`egressguard apply` enables it with a reference of its own (pfctl -E); never `pfctl -d`, it drops every component's reference",
    });
  } else {
    add({
      severity: 'info',
      area: 'pf',
      code: 'pf-enabled',
      message: `pf is enabled, held by ${holders.length} reference${holders.length === 1 ? '' : 's'}: ${holders.map((h) => `${h.name} (pid ${h.pid}${h === ours ? ', ours' : ''})`).join(', ') || 'none listed'}`,
      hint: 'pf stays enabled while any reference is held; egressguard releases only its own (pfctl -X)',
    });
  }
  if (snapshot.ownToken !== null && ours === undefined) {
    add({
      severity: 'warning',
      area: 'pf',
      code: 'pf-reference-lost',
      message: `egressguard's reference ${snapshot.ownToken} (pfctl -E) is not listed by pfctl -s References: pf stays enabled only while others hold theirs`,
      hint: 'run `egressguard apply` again: it takes a new reference',
    });
  }

  const slash = anchor.lastIndexOf('/');
  const wildcard = slash < 0 ? null : `${anchor.slice(0, slash)}/*`;
  const hooks = (text: string, keyword: string): string | null => {
    for (const point of wildcard === null ? [anchor] : [anchor, wildcard]) {
      if (new RegExp(`^${keyword} "${escape(point)}"`, 'm').test(text)) return point;
    }
    return null;
  };
  const filterHook = hooks(snapshot.mainRules, 'anchor');
  const natHook = hooks(snapshot.mainNat, 'nat-anchor');
  const stanza = snapshot.pfConf === null ? null : findPfConfStanzas(snapshot.pfConf, anchor);
  if (filterHook !== null) {
    add({
      severity: 'info',
      area: 'attachment',
      code: 'anchor-attached',
      message: `anchor "${anchor}" is evaluated through anchor "${filterHook}"${natHook === null ? '' : ` and nat-anchor "${natHook}"`} of the main ruleset`,
      hint:
        options.attach === 'stanza'
          ? 'attached by the pf.conf stanza'
          : 'attached without editing pf.conf: the stock com.apple/* hooks evaluate it',
    });
    const scrubHook = [anchor, ...(wildcard === null ? [] : [wildcard])].find((point) =>
      new RegExp(
        `^(scrub-anchor "${escape(point)}"|anchor "${escape(point)}".*\\bfragment\\b)`,
        'm',
      ).test(snapshot.mainRules),
    );
    if (scrubHook === undefined && /^scrub /m.test(snapshot.anchorRules ?? '')) {
      add({
        severity: 'warning',
        area: 'attachment',
        code: 'scrub-anchor-missing',
        message: `no scrub-anchor of the main ruleset reaches "${anchor}": its fragment reassembly is never consulted, and a fragment is filtered without its ports or tags (XNU pf_test_fragment)`,
        hint:
          options.attach === 'stanza'
            ? 'apply again with --pf-attach stanza: its block writes the scrub-anchor line (it applies at the next boot)'
            : 'restore the stock scrub-anchor "com.apple/*" line of /etc/pf.conf (it applies at the next boot)',
      });
    }
    // `to: self` is a list of the facts' interfaces in parentheses (lo0 always among them), which
    // the kernel follows as their addresses change; an interface the facts did not name when the
    // anchor was compiled is not the host's to our rules.
    const followed = new Set(
      [...(snapshot.anchorRules ?? '').matchAll(/\(([A-Za-z0-9_.]+)(?::[a-z0-9]+)?\)/g)].map(
        (m) => m[1],
      ),
    );
    // An IPv6 link-local address is reached only from its own link: no workload's packet from
    // another interface can be addressed to it (a Mac's utun0-3, awdl0 and llw0 have only those).
    const routable = (i: { readonly addresses: readonly string[] }) =>
      i.addresses.filter((a) => !/^fe[89ab][0-9a-f]:/i.test(a));
    const unlisted = followed.has('lo0')
      ? (snapshot.interfaces ?? []).filter((i) => routable(i).length > 0 && !followed.has(i.name))
      : [];
    for (const iface of unlisted) {
      add({
        severity: 'warning',
        area: 'attachment',
        code: 'host-interface-not-listed',
        message: `interface ${iface.name} (${routable(iface).join(', ')}) is not among the host's own interfaces in "${anchor}": a class's rules to self do not cover its addresses, so a workload reaches the host there as if it were elsewhere`,
        hint: 'add the interface to the facts file the policy is applied with (or apply on live facts): the anchor then lists it',
      });
    }
    if (natHook === null && snapshot.anchorNat.trim() !== '') {
      add({
        severity: 'warning',
        area: 'attachment',
        code: 'nat-anchor-missing',
        message: `no nat-anchor of the main ruleset reaches "${anchor}": its NAT rules are never consulted`,
        hint: `restore the stock nat-anchor "com.apple/*" line of /etc/pf.conf (it applies at the next boot), or keep NAT out of the policy`,
      });
    }
  } else if (options.attach === 'stanza' && (stanza?.blocks.length ?? 0) > 0) {
    add({
      severity: 'warning',
      area: 'attachment',
      code: 'stanza-not-loaded',
      message: `pf.conf holds egressguard's block, but the main ruleset pf runs was loaded before it: anchor "${anchor}" is not evaluated until macOS loads ${options.pfConf} again, at boot`,
      hint: 'reboot in a maintenance window; egressguard never runs `pfctl -f /etc/pf.conf` (DESIGN.md §1A)',
    });
  } else {
    add({
      severity: 'error',
      area: 'attachment',
      code: 'anchor-not-evaluated',
      message: `no anchor of the main ruleset reaches "${anchor}"${wildcard === null ? '' : ` (neither anchor "${wildcard}" nor anchor "${anchor}")`}: its rules are loaded but never evaluated`,
      hint:
        wildcard === null
          ? 'apply with --pf-attach stanza (a marked block in pf.conf, from the next boot)'
          : `restore the stock anchor "${wildcard}" line of /etc/pf.conf, or apply with --pf-attach stanza`,
    });
  }

  for (const sibling of snapshot.earlierSiblings.filter((s) => s.quick.length > 0)) {
    add({
      severity: 'warning',
      area: 'siblings',
      code: 'sibling-passes-quick',
      message: `anchor "${sibling.anchor}" sorts before "${anchor}", is evaluated first, and passes quick: ${sibling.quick.join('; ')}`,
      hint: 'a quick pass ends evaluation before our rules see the packet: remove its quick, or give --anchor a name that sorts before it',
    });
  }

  if (/^nat-anchor "com\.apple\.internet-sharing\/\*"/m.test(snapshot.mainNat)) {
    add({
      severity: 'info',
      area: 'internet-sharing',
      code: 'internet-sharing-active',
      message:
        'Internet Sharing has put its com.apple.internet-sharing anchors into the main ruleset: its NAT comes after com.apple/*, and NAT is first match across anchors',
      hint: 'a NAT rule of ours pre-empts its NAT: egressguard emits uplink NAT only when the policy asks for it',
    });
  }

  if (snapshot.pfConf === null) {
    add({
      severity: 'info',
      area: 'pf-conf',
      code: 'pf-conf-unreadable',
      message: `cannot read ${options.pfConf}: its stanzas are not checked`,
      hint: 'run doctor as root, or point --pf-conf at the file',
    });
  } else {
    const parsed = parsePfConf(snapshot.pfConf, { file: options.pfConf });
    for (const problem of parsed.problems) {
      add({
        severity: 'error',
        area: 'pf-conf',
        code: 'pf-conf-invalid',
        message: `${options.pfConf} would be rejected at boot: ${formatPfConfProblems([problem]).trim()}`,
        hint: 'pfctl rejects the whole ruleset on one error, and NAT silently stops (DESIGN.md §1A): fix the file',
      });
    }
    const blocks = stanza?.blocks ?? [];
    const duplicated = stanza?.duplicated ?? [];
    if (duplicated.length > 0) {
      add({
        severity: 'error',
        area: 'pf-conf',
        code: 'pf-conf-duplicate-block',
        message: `${options.pfConf} holds ${blocks.length} egressguard blocks (lines ${blocks.map((b) => b.begin).join(', ')}), and more than one of them holds ${duplicated.join('; ')}`,
        hint: 'a duplicated block once made pfctl reject the whole ruleset: `egressguard apply --pf-attach stanza` keeps one of each, `remove` takes them out',
      });
    } else if (blocks.length > 0) {
      add({
        severity: 'info',
        area: 'pf-conf',
        code: 'pf-conf-stanza',
        message:
          blocks.length === 1
            ? `${options.pfConf} holds egressguard's marked block at line ${blocks[0]?.begin ?? 0}`
            : `${options.pfConf} holds egressguard's marked blocks at lines ${blocks.map((b) => b.begin).join(', ')} (one per kind of rule, as pf's rule order requires)`,
        hint: 'egressguard owns them: edits inside them are replaced',
      });
    }
    for (const line of stanza?.unmarked ?? []) {
      add({
        severity: 'warning',
        area: 'pf-conf',
        code: 'pf-conf-unmarked-stanza',
        message: `${options.pfConf} line ${line.line} names our anchor outside a marked block: ${line.text.trim()}`,
        hint: 'an older installer wrote it: delete it by hand, or let `egressguard apply --pf-attach stanza` (whose anchor it names) migrate it into one marked block',
      });
    }
    const loads = new Map<string, number[]>();
    for (const [index, line] of snapshot.pfConf.split('\n').entries()) {
      const name = /^\s*load\s+anchor\s+"?([^"\s]+)"?\s+from\b/.exec(line)?.[1];
      if (name !== undefined) loads.set(name, [...(loads.get(name) ?? []), index + 1]);
    }
    for (const [name, lines] of loads) {
      if (lines.length < 2) continue;
      add({
        severity: 'error',
        area: 'pf-conf',
        code: 'pf-conf-duplicate-load',
        message: `${options.pfConf} loads anchor "${name}" ${lines.length} times (lines ${lines.join(', ')}): pfctl fails with "Resource busy" and loads no rule at all`,
        hint: 'keep one `load anchor` line per anchor (NOTES §4)',
      });
    }
    if (
      options.attach === 'anchor' &&
      wildcard !== null &&
      !new RegExp(`^\\s*anchor\\s+"${escape(wildcard)}"`, 'm').test(snapshot.pfConf)
    ) {
      add({
        severity: 'warning',
        area: 'pf-conf',
        code: 'pf-conf-no-hook',
        message: `${options.pfConf} has no anchor "${wildcard}" line: after the next boot pf will not reach "${anchor}"`,
        hint: `put back Apple's stock hooks, or apply with --pf-attach stanza`,
      });
    }
  }

  const count = (severity: DoctorFinding['severity']) =>
    findings.filter((f) => f.severity === severity).length;
  return {
    findings,
    areas: AREAS,
    tables: [
      {
        title: 'pf enable references',
        header: ['pid', 'process', 'token', 'ours'],
        rows: holders.map((h) => [h.pid, h.name, h.token, h === ours ? 'yes' : '']),
      },
      {
        title: `anchors evaluated before "${anchor}"`,
        header: ['anchor', 'pass quick rules'],
        rows: snapshot.earlierSiblings.map((s) => [s.anchor, String(s.quick.length)]),
      },
    ],
    summary: { errors: count('error'), warnings: count('warning'), infos: count('info') },
    pf: {
      enabled,
      anchor,
      attach: options.attach,
      attachedThrough: filterHook,
      natThrough: natHook,
      references: holders.map((h) => ({ ...h, ours: h === ours })),
    },
  };
}

/** `pfctl -s References` rows (XNU DIOCGETSTARTERS; the column layout is unverified). */
function parseReferences(text: string): { pid: string; name: string; token: string }[] {
  const out: { pid: string; name: string; token: string }[] = [];
  for (const line of text.split('\n')) {
    const match = /^\s*(\d+)\s+(.*?)\s+(\d{6,})\s/.exec(`${line} `);
    if (match !== null)
      out.push({ pid: match[1] ?? '', name: match[2] ?? '', token: match[3] ?? '' });
  }
  return out;
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
