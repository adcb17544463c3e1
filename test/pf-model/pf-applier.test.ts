import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { FILES, readStatus, removeGeneration, restoreGeneration } from '../../src/apply/index.js';
import { pfBackend } from '../../src/backends/pf/index.js';
import { DEFAULT_ANCHOR } from '../../src/backends/pf/pf-options.js';
import { parseReferenceTokens } from '../../src/backends/pf/pfctl-command.js';
import { readOwnToken } from '../../src/backends/pf/pf-token.js';
import { parseIpv4 } from '../../src/core/index.js';
import { applyPrepared, hostContext, planPrepared } from '../../src/host/index.js';
import { createPfModelHost, RUNNER_CASE, type PfModelHost } from './support.js';

// The pf applier and inspector through the apply layer (host lock, generations, read-back),
// against the pfctl MODEL of a stock macOS host: pf does not run on Linux (DESIGN.md §4, pf).
const A = DEFAULT_ANCHOR;
const hosts: PfModelHost[] = [];
afterEach(() => {
  for (const host of hosts.splice(0)) host.cleanup();
});
function host(options?: Parameters<typeof createPfModelHost>[0]): PfModelHost {
  const created = createPfModelHost(options);
  hosts.push(created);
  return created;
}

const VM = parseIpv4('192.168.64.5') as number;
function vmConnection(h: PfModelHost, destination: string, port = 443) {
  return h.model.forwardPacket({
    family: 4,
    source: VM,
    destination: parseIpv4(destination) as number,
    protocol: 6,
    sourcePort: 50_000 + port,
    destinationPort: port,
    ingress: 'bridge100',
    egress: 'en0',
  });
}

/** The runner-fleet policy with the cache's port changed: a change of live rules. */
function changedPolicy(h: PfModelHost): string {
  const path = join(h.dir, 'changed.yaml');
  writeFileSync(
    path,
    readFileSync(join(RUNNER_CASE, 'policy.yaml'), 'utf8').replace(
      'proto: tcp, ports: [4000] }',
      'proto: tcp, ports: [4001] }',
    ),
  );
  return path;
}

function ourTokens(h: PfModelHost): string[] {
  const own = readOwnToken(h.tokenFile);
  const listed = parseReferenceTokens(h.model.run(['-s', 'References']).stdout);
  return listed.filter((t) => t === own?.token);
}

function status(h: PfModelHost, hash?: string) {
  return readStatus({ ...hostContext(h.target, pfBackend), desiredHash: hash });
}

describe('pf applier on the pfctl model', () => {
  it('plans, applies, reads back by labels and shows the anchor consulted', async () => {
    const h = host();
    const prepared = h.prepare();
    const plan = await planPrepared(h.target, prepared);
    expect(plan.problems).toEqual([]);
    expect(plan.changes).toEqual([
      `+ pf anchor "${A}" (5 tables, 1 nat, 65 filter rules)`,
      '+ pf enable reference of our own (pfctl -E)',
    ]);
    const report = await applyPrepared(h.target, prepared);
    expect(report.changed).toBe(true);
    const live = await status(h, prepared.hash);
    expect(live.condition).toBe('InSync');
    expect(live.liveHash).toBe(prepared.hash);
    expect(live.live.collisions).toEqual([]);
    expect((await planPrepared(h.target, prepared)).changes).toEqual([]);

    // Consulted, not only loaded: the rules' counters move when VM packets pass.
    expect(live.live.counters.every((c) => c.packets === 0)).toBe(true);
    expect(vmConnection(h, '10.42.0.10', 4000).verdict).toBe('pass');
    expect(vmConnection(h, '10.9.9.9').verdict).toBe('block');
    const nat = vmConnection(h, '203.0.113.7');
    expect(nat.leaving?.source).toBe(parseIpv4('198.51.100.20'));
    const counted = new Map((await status(h)).live.counters.map((c) => [c.id, c.packets]));
    expect(counted.get('allow-cache')).toBe(1);
    expect(counted.get('deny-private')).toBe(1);
    expect(counted.get('vm/default')).toBe(1);
    expect(h.model.run(['-a', A, '-vsr']).stdout).toMatch(/Evaluations: [1-9]/);
  });

  it('after 100 re-converges exactly one reference is ours; remove releases it with -X', async () => {
    const h = host();
    const prepared = h.prepare();
    await applyPrepared(h.target, prepared);
    for (let i = 0; i < 100; i++) {
      // Drift now and then: our anchor flushed by someone, or a reboot (tokens die with it).
      if (i % 25 === 10) h.model.run(['-a', A, '-F', 'all']);
      if (i % 25 === 20) {
        h.model.reboot();
        h.model.run(['-f', '/etc/pf.conf'], { pid: 1, processName: 'launchd' });
        h.model.run(['-E'], { pid: 312, processName: 'socketfilterfw' });
      }
      await applyPrepared(h.target, prepared);
      expect(ourTokens(h)).toHaveLength(1);
    }
    const references = h.model.run(['-s', 'References']).stdout;
    expect(parseReferenceTokens(references)).toHaveLength(2); // ours and socketfilterfw's
    expect(h.model.state.tokens.filter((t) => t.name === 'pfctl')).toHaveLength(1);

    const removed = await removeGeneration(hostContext(h.target, pfBackend));
    expect(removed).toEqual([
      `pf anchor "${A}"`,
      expect.stringMatching(/^pf enable reference \d+$/),
    ]);
    expect(parseReferenceTokens(h.model.run(['-s', 'References']).stdout)).toHaveLength(1);
    expect(h.model.state.enabled).toBe(true); // the system's reference keeps pf on
    expect(h.model.run(['-a', A, '-sr']).stdout).toBe('');
    expect(readOwnToken(h.tokenFile)).toBeNull();
  });

  it('kills the class sources’ states when live rules change, never on a no-op re-converge', async () => {
    const h = host();
    const prepared = h.prepare();
    await applyPrepared(h.target, prepared);
    vmConnection(h, '203.0.113.7');
    const states = h.model.state.states.length;
    expect(states).toBeGreaterThan(0);
    const kills = () => h.runner.invocations.filter((i) => i.argv.includes('-k'));
    const before = kills().length;
    await applyPrepared(h.target, prepared);
    await applyPrepared(h.target, prepared, { force: false });
    expect(h.model.state.states).toHaveLength(states);
    expect(kills()).toHaveLength(before);

    await applyPrepared(h.target, h.prepare(changedPolicy(h)));
    expect(h.model.state.states).toHaveLength(0);
    expect(
      kills()
        .slice(before)
        .map((i) => i.argv.slice(1)),
    ).toEqual([['-k', '192.168.64.0/22']]);
  });

  it('reports rules loaded but not consulted, and siblings that pass quick before ours', async () => {
    const h = host();
    const prepared = h.prepare();
    await applyPrepared(h.target, prepared);
    h.model.insertSystemRules('com.apple/100.other', 'pass in quick on bridge100 all\n');
    const sibling = await status(h);
    expect(sibling.live.collisions).toEqual([
      `anchor "com.apple/100.other" is evaluated before "${A}" and passes quick: pass in quick on bridge100 all flags S/SA keep state`,
    ]);
    // Someone loads a main ruleset without the com.apple hooks: our anchor is still loaded.
    h.model.state.files['/tmp/bare.conf'] = 'pass all\n';
    h.model.run(['-f', '/tmp/bare.conf'], { pid: 77, processName: 'someone' });
    const bare = await status(h, prepared.hash);
    expect(bare.condition).toBe('Drifted');
    expect(bare.reasons.join('\n')).toContain('our rules are loaded but not consulted');
    expect(bare.reasons.join('\n')).toContain('our NAT is loaded but not consulted');
    await expect(applyPrepared(h.target, prepared, { force: true })).rejects.toThrow(
      /not consulted/,
    );
  });

  it('restores after a reboot: the anchor and a new reference of ours', async () => {
    const h = host();
    const prepared = h.prepare();
    await applyPrepared(h.target, prepared);
    h.model.reboot();
    h.model.run(['-f', '/etc/pf.conf'], { pid: 1, processName: 'launchd' });
    expect((await status(h, prepared.hash)).condition).toBe('Drifted');
    const outcome = await restoreGeneration(hostContext(h.target, pfBackend));
    expect(outcome.kind).toBe('restored');
    const after = await status(h, prepared.hash);
    expect(after.condition).toBe('InSync');
    expect(ourTokens(h)).toHaveLength(1);
    expect(h.model.state.enabled).toBe(true);
  });

  it('restores the class lockdown when the applied state is lost: fail closed', async () => {
    const h = host();
    await applyPrepared(h.target, h.prepare());
    rmSync(h.target.state.file(FILES.applied));
    h.model.reboot();
    h.model.run(['-f', '/etc/pf.conf'], { pid: 1, processName: 'launchd' });
    const outcome = await restoreGeneration(hostContext(h.target, pfBackend));
    expect(outcome.kind).toBe('lockdown');
    const blocked = vmConnection(h, '203.0.113.7');
    expect(blocked.verdict).toBe('block');
    expect(blocked.inbound.label).toBe('egressguard-lockdown');
    expect(h.model.state.enabled).toBe(true);
  });
});
