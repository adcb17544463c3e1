import {
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readStatus, removeGeneration, restoreGeneration } from '../../src/apply/index.js';
import { readStockPfFiles } from '../../sim/pf/create-macos-pf-host.js';
import { pfBackend } from '../../src/backends/pf/index.js';
import { parsePfConf } from '../../src/backends/pf/parse-pf-conf.js';
import { findPfConfStanzas, STANZA_BEGIN } from '../../src/backends/pf/pf-conf-stanza.js';
import { findForbiddenPfctlForms } from '../../sim/pf/pfctl-model.js';
import { PF_CONF_RENAME_POINT } from '../../src/backends/pf/write-pf-conf.js';
import { applyPrepared, hostContext, planPrepared } from '../../src/host/index.js';
import { createPfModelHost, type PfModelHost } from './support.js';

// `--pf-attach stanza` on the pfctl MODEL: marked blocks in pf.conf (scrub-anchor, nat-anchor,
// anchor, each among the lines of its kind) attach the top-level anchor "egressguard" from the
// next boot; egressguard writes pf.conf through that path only and
// never loads it (DESIGN.md §1A). The pf.conf here is a temporary copy (`--pf-conf`).
const hosts: PfModelHost[] = [];
const dirs: string[] = [];
afterEach(() => {
  for (const h of hosts.splice(0)) h.cleanup();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function stanzaHost(
  text: string,
  variant: 'current' | 'legacy' = 'legacy',
  options: { symlinked?: boolean } = {},
) {
  const dir = mkdtempSync(join(tmpdir(), 'eg-pf-stanza-'));
  dirs.push(dir);
  const pfConf = join(dir, 'pf.conf');
  if (options.symlinked === true) {
    // pf.conf kept elsewhere and linked (configuration management does this).
    mkdirSync(join(dir, 'managed'));
    writeFileSync(join(dir, 'managed', 'pf.conf'), text, { mode: 0o644 });
    symlinkSync('managed/pf.conf', pfConf);
  } else {
    writeFileSync(pfConf, text, { mode: 0o644 });
  }
  const h = createPfModelHost({
    pfConf: readStockPfFiles(variant).pfConf,
    backendOptions: { pfAttach: 'stanza', pfConf },
  });
  hosts.push(h);
  return { h, pfConf, context: hostContext(h.target, pfBackend) };
}

const LEGACY = readStockPfFiles('legacy').pfConf;
const OLDER =
  'anchor "egressguard"\nload anchor "egressguard" from "/etc/pf.anchors/egressguard"\n';

describe('the pf.conf stanza attachment (--pf-attach stanza)', () => {
  it('apply writes one marked block per kind of line, twice gives the same, and the anchor waits for the next boot', async () => {
    const { h, pfConf, context } = stanzaHost(LEGACY);
    const prepared = h.prepare();
    const plan = await planPrepared(h.target, prepared);
    expect(plan.problems).toEqual([]);
    expect(plan.changes).toContain(
      `~ "${pfConf}": 3 egressguard blocks attaching anchor "egressguard" from the next boot`,
    );
    const report = await applyPrepared(h.target, prepared);
    expect(report.deferred.map((d) => d.until)).toEqual([
      'the next boot, when macOS loads pf.conf',
      'the next boot, when macOS loads pf.conf',
      'the next boot, when macOS loads pf.conf',
    ]);
    expect(report.deferred.map((d) => d.what)[0]).toMatch(/^a scrub-anchor point/);
    const once = readFileSync(pfConf, 'utf8');
    // Every other byte of Apple's file as it was; each block where pf's rule order holds: the
    // scrub-anchor among the normalization lines, the nat-anchor among the translation ones.
    expect(once.replace(/# BEGIN egressguard[^]*?# END egressguard\n/g, '')).toBe(LEGACY);
    expect(findPfConfStanzas(once, 'egressguard').blocks).toHaveLength(3);
    expect(once).toContain(
      `scrub-anchor "com.apple/*"\n${STANZA_BEGIN}\nscrub-anchor "egressguard"\n# END egressguard\nnat-anchor "com.apple/*"\n`,
    );
    expect(once).toContain(`${STANZA_BEGIN}\nnat-anchor "egressguard"\n# END egressguard\n`);
    expect(once).toContain(`${STANZA_BEGIN}\nanchor "egressguard"\n# END egressguard\n`);
    await applyPrepared(h.target, prepared, { force: true });
    expect(readFileSync(pfConf, 'utf8')).toBe(once);
    const status = await readStatus({ ...context, desiredHash: prepared.hash });
    expect(status.condition).toBe('InSync');
    expect(status.reasons[0]).toMatch(/^waiting for the next boot, when macOS loads pf.conf: /);

    // The next boot loads the edited pf.conf (launchd, not egressguard) and restore re-arms.
    h.model.state.files['/etc/pf.conf'] = once;
    h.model.reboot();
    expect(h.model.run(['-f', '/etc/pf.conf'], { pid: 1, processName: 'launchd' }).exitCode).toBe(
      0,
    );
    expect(await restoreGeneration(context)).toMatchObject({ kind: 'restored' });
    const booted = await readStatus({ ...context, desiredHash: prepared.hash });
    expect(booted.condition).toBe('InSync');
    expect(booted.reasons).toEqual([]);
    expect(h.model.run(['-s', 'rules']).stdout).toContain('anchor "egressguard" all');
    // The scrub-anchor line reaches the anchor's `scrub … fragment reassemble`: a later fragment
    // of a datagram to the cache's service port is judged like its datagram (allow-cache), as
    // explain says, not without its ports (pf_test_fragment) as it was before the line.
    expect(h.model.run(['-s', 'rules']).stdout).toContain('scrub-anchor "egressguard" all');
    const fragment = h.model.forwardPacket({
      family: 4,
      source: 0xc0a84005,
      destination: 0x0a2a000a, // 10.42.0.10
      protocol: 6,
      sourcePort: 50_000,
      destinationPort: 4000,
      fragment: 'non-first',
      ingress: 'bridge100',
      egress: 'en0',
    });
    expect([fragment.verdict, fragment.inbound.label, fragment.inbound.fragment]).toEqual([
      'pass',
      'allow-cache',
      'reassembled',
    ]);

    const removed = await removeGeneration(context);
    expect(JSON.stringify(removed)).toContain(`the egressguard blocks of \\"${pfConf}\\"`);
    expect(readFileSync(pfConf, 'utf8')).toBe(LEGACY);
    // egressguard never loaded the main ruleset: only launchd did, at boot.
    expect(h.runner.invocations.flatMap((i) => findForbiddenPfctlForms(i.argv.slice(1)))).toEqual(
      [],
    );
  });

  it('leaves pf.conf as it was when a step after the load fails', async () => {
    for (const point of [
      'before-pf-load',
      'after-pf-load',
      'after-pf-reference',
      PF_CONF_RENAME_POINT,
    ]) {
      const { h, pfConf } = stanzaHost(LEGACY);
      h.faults.set(point, 'fail');
      await expect(applyPrepared(h.target, h.prepare())).rejects.toThrow();
      expect(readFileSync(pfConf, 'utf8'), point).toBe(LEGACY);
    }
  });

  it('edits a symlinked pf.conf where it lives: apply and remove keep the link', async () => {
    const { h, pfConf, context } = stanzaHost(LEGACY, 'legacy', { symlinked: true });
    const target = join(pfConf, '..', 'managed', 'pf.conf');
    await applyPrepared(h.target, h.prepare());
    expect(lstatSync(pfConf).isSymbolicLink()).toBe(true);
    expect(findPfConfStanzas(readFileSync(target, 'utf8'), 'egressguard').blocks).toHaveLength(3);
    await removeGeneration(context);
    expect(lstatSync(pfConf).isSymbolicLink()).toBe(true);
    expect(readFileSync(target, 'utf8')).toBe(LEGACY);
  });

  it('migrates an older unmarked stanza and a duplicated block into marked blocks, one of each', async () => {
    const legacyWithOld = `${LEGACY}${OLDER}${STANZA_BEGIN}\nanchor "egressguard"\n# END egressguard\n${STANZA_BEGIN}\n${OLDER}# END egressguard\n`;
    const { h, pfConf } = stanzaHost(legacyWithOld);
    await applyPrepared(h.target, h.prepare());
    const text = readFileSync(pfConf, 'utf8');
    const found = findPfConfStanzas(text, 'egressguard');
    expect(found.blocks).toHaveLength(3);
    expect(found.duplicated).toEqual([]);
    expect(found.unmarked).toEqual([]);
    expect(text).not.toContain('load anchor "egressguard"');
  });

  it('attaches on the current stock pf.conf too (dummynet-anchor between the kinds)', async () => {
    const current = readStockPfFiles('current').pfConf;
    const { h, pfConf } = stanzaHost(current, 'current');
    await applyPrepared(h.target, h.prepare());
    const text = readFileSync(pfConf, 'utf8');
    expect(text.replace(/# BEGIN egressguard[^]*?# END egressguard\n/g, '')).toBe(current);
    expect(parsePfConf(text, { file: 'pf.conf' }).problems).toEqual([]);
  });

  it('refuses blocks pf.conf cannot hold in order, and changes nothing', async () => {
    // A file out of pf's order itself (require-order off): no place keeps a nat-anchor in order.
    const disordered = 'set require-order no\nanchor "com.apple/*"\nscrub-anchor "com.apple/*"\n';
    const { h, pfConf } = stanzaHost(disordered, 'current');
    const before = h.model.state.log.length;
    await expect(applyPrepared(h.target, h.prepare())).rejects.toThrow(
      new RegExp(
        `^Cannot attach anchor "egressguard" in "${pfConf.replace(/[.]/g, '\\.')}" \\(line 3\\): Cannot place the egressguard block in pf.conf: pf requires rules in order`,
      ),
    );
    expect(readFileSync(pfConf, 'utf8')).toBe(disordered);
    // Only the `-n` check ran: no load.
    expect(
      h.model.state.log.slice(before).some((e) => e.argv.includes('-f') && !e.argv.includes('-n')),
    ).toBe(false);
  });

  it('refuses a com.apple/ anchor with a stanza: pf would evaluate it twice', () => {
    const { h } = stanzaHost(LEGACY);
    const target = { ...h.target, options: { ...h.target.options, anchor: 'com.apple/250.x' } };
    expect(() => pfBackend.createApplier({ runner: h.runner, options: target.options })).toThrow(
      'Cannot attach anchor "com.apple/250.x" with --pf-attach stanza: pf evaluates it through anchor "com.apple/*" already',
    );
  });
});
