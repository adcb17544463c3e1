import { readFileSync } from 'node:fs';
import { createStepTimer, EgressguardError } from '../../core/index.js';
import type { Runner } from '../../runner/index.js';
import type { Applier, Artifact } from '../backend.js';
import { anchorText, checkConsulted, readDesiredAnchor, readLiveAnchor } from './pf-inspector.js';
import { findPfConfStanzas, installPfConfStanza, removePfConfStanza } from './pf-conf-stanza.js';
import type { PfOptions } from './pf-options.js';
import { writePfConf } from './write-pf-conf.js';
import { forgetOwnToken, readOwnToken, writeOwnToken } from './pf-token.js';
import { parseEnableToken, parseReferenceTokens, type Pfctl } from './pfctl-command.js';

/** Fault points of a pf apply, in the order an apply reaches them (kill points). */
export const PF_KILL_POINTS = ['before-pf-load', 'after-pf-load', 'after-pf-reference'] as const;

/**
 * The pf applier (DESIGN.md §4, pf): validate with `pfctl -n -a ANCHOR -f -`, load the anchor
 * alone with `pfctl -a ANCHOR -f -` (one transaction: tables, NAT, filter), keep pf enabled with
 * our own `-E` token (checked with `-s References` before another is taken), and kill the class
 * sources' states only when live rules changed. Never `pfctl -f /etc/pf.conf`, never `-F`
 * without `-a`, never `-d`; no blind retry of "Resource busy" (the host lock serialises us).
 */
export function createPfApplier(pfctl: Pfctl, options: PfOptions, runner: Runner): Applier {
  const { anchor } = options;

  const validate = async (text: string): Promise<string | null> => {
    const checked = await pfctl.read(['-n', '-a', anchor, '-f', '-'], text);
    return checked.exitCode === 0 ? null : pfctlComplaint(checked.stderr);
  };

  const load = async (text: string): Promise<void> => {
    const loaded = await pfctl.tryChange(['-a', anchor, '-f', '-'], text);
    if (loaded.exitCode !== 0) {
      throw new EgressguardError(
        'apply-failed',
        `Cannot load pf anchor "${anchor}": pfctl exited with ${loaded.exitCode}: ${pfctlComplaint(loaded.stderr)}`,
        {
          hint: /Resource busy/.test(loaded.stderr)
            ? 'another process loaded this anchor at the same time (a transaction collision); nothing changed: apply again'
            : 'nothing changed; run `egressguard plan` to see what pfctl rejects',
        },
      );
    }
  };

  /** Our own reference: kept when `-s References` still lists it, else taken anew. */
  const ensureReference = async (): Promise<boolean> => {
    const own = readOwnToken(options.tokenFile);
    if (own !== null) {
      const listed = await pfctl.read(['-s', 'References']);
      if (parseReferenceTokens(listed.stdout).includes(own.token)) return false;
    }
    const enabled = await pfctl.change(['-E']);
    const token = parseEnableToken(enabled);
    if (token === null) {
      throw new EgressguardError('apply-failed', 'Cannot read the token `pfctl -E` printed', {
        hint: `pfctl printed: ${(enabled.stderr + enabled.stdout).trim() || 'nothing'}`,
      });
    }
    writeOwnToken(options.tokenFile, token);
    return true;
  };

  /**
   * `--pf-attach stanza`: the marked blocks in pf.conf that attach our top-level anchor
   * (pf-conf-stanza.ts): `scrub-anchor` when the anchor holds scrub rules (without it pf never
   * reaches our fragment reassembly, and a fragment is filtered without its ports and tags:
   * XNU pf.c pf_test_fragment), `nat-anchor` when it holds NAT, and `anchor`. Only this path
   * writes pf.conf, and nothing loads it: pf reads it at the next boot (never `pfctl -f
   * /etc/pf.conf`, DESIGN.md §1A). Checked before anything changes: a block that cannot be
   * placed is a usage error and pf.conf and pf stay as they were.
   */
  const planStanza = (artifacts: readonly Artifact[] | null) => {
    const text = readPfConf(options.pfConf);
    const desired = artifacts === null ? null : readDesiredAnchor(anchorText(artifacts), anchor);
    const outcome =
      desired === null
        ? removePfConfStanza(text, anchor)
        : installPfConfStanza(text, {
            anchor,
            lines: [
              ...(desired.scrubRules > 0 ? [`scrub-anchor "${anchor}"`] : []),
              ...(desired.natRules > 0 ? [`nat-anchor "${anchor}"`] : []),
              `anchor "${anchor}"`,
            ],
          });
    if (!outcome.ok) {
      throw new EgressguardError(
        'usage',
        `Cannot ${artifacts === null ? 'remove the egressguard block from' : 'attach anchor "' + anchor + '" in'} "${options.pfConf}"${outcome.problem.line === null ? '' : ` (line ${outcome.problem.line})`}: ${outcome.problem.message}`,
        {
          hint: 'nothing changed; apply with --pf-attach anchor (the default) to leave pf.conf alone',
        },
      );
    }
    return outcome.result;
  };

  const writeConf = (text: string): Promise<void> =>
    writePfConf(options.pfConf, text, { faults: runner.faults });

  const killStates = (artifacts: readonly Artifact[]): Promise<void> =>
    killClassStates(pfctl, anchorText(artifacts), anchor);

  return {
    async plan(artifacts) {
      const text = anchorText(artifacts);
      const problems: string[] = [];
      const complaint = await validate(text);
      if (complaint !== null) problems.push(`pfctl rejects the anchor: ${complaint}`);
      const live = await readLiveAnchor(pfctl, anchor);
      const wanted = /eg-hash:([0-9a-f]{64})/.exec(text)?.[1] ?? null;
      const desired = readDesiredAnchor(text, anchor);
      const changes: string[] = [];
      const rules = [...desired.filterLabels.values()].reduce((a, b) => a + b, 0);
      if (!live.exists) {
        changes.push(
          `+ pf anchor "${anchor}" (${desired.tables.size} tables, ${desired.natRules} nat, ${rules} filter rules)`,
        );
      } else if (live.hash !== wanted) {
        changes.push(`~ pf anchor "${anchor}" (hash ${short(live.hash)} → ${short(wanted)})`);
      }
      const own = readOwnToken(options.tokenFile);
      const listed = await pfctl.read(['-s', 'References']);
      if (own === null || !parseReferenceTokens(listed.stdout).includes(own.token)) {
        changes.push('+ pf enable reference of our own (pfctl -E)');
      }
      if (options.attach === 'stanza') {
        try {
          const stanza = planStanza(artifacts);
          if (stanza.changed) {
            const blocks = findPfConfStanzas(stanza.text, anchor).blocks.length;
            changes.push(
              `~ "${options.pfConf}": ${blocks === 1 ? 'one egressguard block' : `${blocks} egressguard blocks`} attaching anchor "${anchor}" from the next boot${stanza.migrated.length === 0 ? '' : ` (${stanza.migrated.length} older lines migrated)`}`,
            );
          }
        } catch (error) {
          problems.push((error as Error).message);
        }
      }
      return { changes, problems };
    },

    async apply(artifacts, applyOptions) {
      const timer = applyOptions.timer ?? createStepTimer();
      const text = anchorText(artifacts);
      if (applyOptions.routingOnly === true) {
        // No routing of our own: the anchor is intact; keep our reference.
        await ensureReference();
        return { deferred: [] };
      }
      const complaint = await timer.time('validate', () => validate(text));
      if (complaint !== null) {
        throw new EgressguardError(
          'apply-failed',
          `Cannot apply: pfctl rejects the anchor: ${complaint}`,
          {
            // parse.y checks that a route-to interface exists: facts that name a utun the host
            // no longer has (a VPN renumbered since they were read) are the usual cause.
            hint: /routeto: unknown interface/.test(complaint)
              ? 'nothing changed; the facts name a tunnel interface this host does not have now (a VPN renumbers its utun on every reconnect): apply on live facts, or add --live-tunnels to --facts FILE'
              : 'nothing changed; this is a compiler bug or a pfctl this build does not know: report it',
          },
        );
      }
      const stanza = options.attach === 'stanza' ? planStanza(artifacts) : null;
      const before = await timer.time('read live', () => readLiveAnchor(pfctl, anchor));
      await runner.faults.hit('before-pf-load');
      // pf.conf is written only once the anchor is in and read back, and put back if a later
      // step fails: a refused apply leaves it as it was.
      const original = stanza?.changed === true ? readPfConf(options.pfConf) : undefined;
      await timer.time('load', () => load(text));
      let written = false;
      try {
        await runner.faults.hit('after-pf-load');
        await timer.time('reference', ensureReference);
        await runner.faults.hit('after-pf-reference');
        const after = await readLiveAnchor(pfctl, anchor);
        // States outlive rules (floating by default): a flow set up under the old rules keeps
        // its path. Kill the class's states when live rules changed, never on a no-op re-converge.
        if (after.fingerprint !== before.fingerprint || applyOptions.force === true) {
          await timer.time('kill states', () => killStates(artifacts));
        }
        if (stanza?.changed === true) {
          await writeConf(stanza.text);
          written = true;
        }
        // A stanza attaches from the next boot: say so, as what the apply waits for.
        const deferred =
          stanza === null
            ? []
            : (
                await checkConsulted(pfctl, options, {
                  nat: after.nat.length > 0,
                  scrub: after.filter.some((r) => r.text.startsWith('scrub ')),
                })
              ).filter((p) => p.until !== undefined);
        return { deferred };
      } catch (error) {
        // The write is atomic: one that failed left the original in place.
        if (written && original !== undefined) await writeConf(original);
        if (applyOptions.previous !== undefined) {
          await load(anchorText(applyOptions.previous));
          // A flow the failed anchor passed in the meantime would outlive it by its state.
          await killStates(applyOptions.previous);
        }
        throw new EgressguardError(
          'partially-applied',
          `Cannot finish the apply: a step after the pf load failed${applyOptions.previous === undefined ? '' : ', so the previous anchor was loaded again'}: ${(error as Error).message}`,
          { cause: error, hint: 'fix the cause and apply again; `status` shows it until then' },
        );
      }
    },

    async lockdown(content) {
      await load(content);
      await ensureReference();
      // A flow set up before passes by its state, without meeting the lockdown's rules (pf.conf(5)
      // STATEFUL FILTERING): kill the states of the sources the lockdown names (its `egsrc_`
      // tables; a lockdown of an older release names none, and kills nothing).
      await killClassStates(pfctl, content, anchor);
    },

    async remove() {
      const removed: string[] = [];
      const stanza = options.attach === 'stanza' ? planStanza(null) : null;
      const live = await readLiveAnchor(pfctl, anchor);
      if (live.exists) {
        // `-F all` with `-a`: this anchor's rules, NAT and tables only (F93 pfctl.c main).
        await pfctl.change(['-a', anchor, '-F', 'all']);
        removed.push(`pf anchor "${anchor}"`);
      }
      const own = readOwnToken(options.tokenFile);
      if (own !== null) {
        const listed = await pfctl.read(['-s', 'References']);
        if (parseReferenceTokens(listed.stdout).includes(own.token)) {
          // Releases our reference only: pf stays enabled while others hold one (XNU 1668–1694).
          await pfctl.change(['-X', own.token]);
          removed.push(`pf enable reference ${own.token}`);
        }
        forgetOwnToken(options.tokenFile);
      }
      if (stanza?.changed === true) {
        await writeConf(stanza.text);
        removed.push(
          `the egressguard blocks of "${options.pfConf}" (${stanza.migrated.length === 0 ? 'marked' : `and ${stanza.migrated.length} older lines`})`,
        );
      }
      return { removed };
    },
  };
}

/**
 * `pfctl -k PREFIX` per entry of the class source tables (`egsrc_…`) an anchor or lockdown text
 * defines: every state from the classes, whichever direction it was made in (the selftest checks
 * this on a real Mac).
 */
export async function killClassStates(
  pfctl: Pfctl,
  content: string,
  anchor: string,
): Promise<void> {
  for (const prefix of readDesiredAnchor(content, anchor).sourcePrefixes) {
    if (prefix.startsWith('!')) continue;
    await pfctl.change(['-k', prefix]);
  }
}

function readPfConf(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    throw new EgressguardError(
      'usage',
      `Cannot read "${path}" to attach the anchor with a stanza`,
      {
        cause: error,
        hint: 'run as root, or point --pf-conf at the pf.conf macOS loads at boot',
      },
    );
  }
}

/** pfctl's message without the warnings it prints on every `-f` (PFCTL_LOAD_WARNING, ALTQ). */
function pfctlComplaint(stderr: string): string {
  const lines = stderr
    .split('\n')
    .map((l) => l.trim())
    .filter(
      (l) =>
        l !== '' &&
        !/^(No ALTQ support|ALTQ related functions|pfctl: Use of -f option|present in the main ruleset|See \/etc\/pf\.conf for further details)/.test(
          l,
        ),
    );
  return lines.join('; ') || 'no message';
}

function short(hash: string | null): string {
  return hash === null ? 'none' : hash.slice(0, 12);
}
