import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packagePath } from '../core/index.js';
import { parseHostFacts, type HostFacts } from '../facts/index.js';
import { compilePolicy, requirePolicy } from '../host/index.js';
import { createHostIrBinder } from './bundle-binder.js';
import { bindingFactsOf, compileBundle, digestBindingFacts } from './compile-bundle.js';
import { decodePolicyIr } from './ir-codec.js';
import { hostBundleSchema, type HostIrBundle } from './protocol.js';

const VALID = packagePath('testdata/policies/valid');
// A pushed policy stands alone: the cases that load network lists from files are not pushable.
const linuxCases = readdirSync(VALID).filter((name) => {
  const facts = JSON.parse(readFileSync(join(VALID, name, 'facts.json'), 'utf8')) as { os: string };
  const text = readFileSync(join(VALID, name, 'policy.yaml'), 'utf8');
  return facts.os === 'linux' && !/^\s*files:/m.test(text);
});

function load(name: string): { text: string; facts: HostFacts } {
  return {
    text: readFileSync(join(VALID, name, 'policy.yaml'), 'utf8'),
    facts: parseHostFacts(
      JSON.parse(readFileSync(join(VALID, name, 'facts.json'), 'utf8')),
      `${name}/facts.json`,
    ),
  };
}

/** What the agent receives: the controller's bundle through JSON and the wire schema. */
function overTheWire(bundle: unknown): HostIrBundle {
  const parsed = hostBundleSchema.parse(JSON.parse(JSON.stringify(bundle)));
  if (parsed.format !== 'egressguard/bundle/host-ir-v1') throw new Error('not a host-IR bundle');
  return parsed;
}

/** Binds as the controller does: the host's labels are its facts' merged with its token's. */
function bind(
  text: string,
  facts: HostFacts,
  options: Record<string, string> = {},
  tokenLabels: Record<string, string> = {},
) {
  const binder = createHostIrBinder();
  const prepared = binder.preparePolicy({ text, source: 'policy.yaml', pushId: 'p1', options });
  if (!prepared.ok) throw new Error(prepared.issues.map((i) => i.message).join('; '));
  return binder.bindHost(prepared.prepared, {
    hostName: facts.hostname,
    facts,
    factsDigest: null,
    labels: { ...facts.labels, ...tokenLabels },
  });
}

describe('host-IR bundles: the controller binds, the agent compiles the same thing', () => {
  it('has pushable Linux examples to compare', () => {
    expect(linuxCases.length).toBeGreaterThanOrEqual(3);
  });

  it.each(linuxCases)(
    '%s: the agent’s compile of the wire bundle has the controller’s hash and `compile`’s artifacts',
    (name) => {
      const { text, facts } = load(name);
      const bound = bind(text, facts);
      if (!bound.ok) throw new Error(bound.message);
      const onAgent = compileBundle(overTheWire(bound.bundle), facts);
      if (!onAgent.ok) throw new Error(onAgent.message);
      expect(onAgent.compiled.hash).toBe(bound.hash);
      // The same as compiling the policy file on the host itself (`egressguard compile`).
      const local = compilePolicy(requirePolicy(join(VALID, name, 'policy.yaml')).policy, facts);
      expect(onAgent.compiled.hash).toBe(local.hash);
      expect(onAgent.compiled.artifacts).toEqual(local.artifacts);
      expect(bound.bundle.factsDigest).toBe(digestBindingFacts(facts));
    },
  );

  it('binds a class by a label the host has only from its bootstrap token, and the agent compiles the same', () => {
    const { text: base, facts } = load('linux-vpn-gateway');
    const text = base.replace(
      '  internet:\n',
      '  internet:\n    hosts: { labels: { site: berlin } }\n',
    );
    expect(text).not.toBe(base);
    expect(facts.labels['site']).toBeUndefined();
    const without = bind(text, facts);
    const withToken = bind(text, facts, {}, { site: 'berlin' });
    if (!without.ok || !withToken.ok) throw new Error('the policy does not bind');
    expect(withToken.hash).not.toBe(without.hash);
    const wire = overTheWire(withToken.bundle);
    expect(wire.labels).toEqual({ role: 'vpn-gateway', site: 'berlin' });
    // The agent's own facts lack the label: it binds with the bundle's, to the controller's hash.
    const onAgent = compileBundle(wire, facts);
    if (!onAgent.ok) throw new Error(onAgent.message);
    expect(onAgent.compiled.hash).toBe(withToken.hash);
    expect(onAgent.compiled.ir.classes.map((c) => c.name)).toContain('internet');
    const bare = compileBundle(overTheWire(without.bundle), facts);
    if (!bare.ok) throw new Error(bare.message);
    expect(bare.compiled.ir.classes.map((c) => c.name)).not.toContain('internet');
    // Not stale on the agent: the digest is of its facts with the bundle's labels.
    expect(wire.factsDigest).toBe(digestBindingFacts(bindingFactsOf(wire, facts)));
    expect(wire.factsDigest).not.toBe(digestBindingFacts(facts));
  });

  it('changes the hash with a backend option alone (the steering priority), the policy unchanged', () => {
    const { text, facts } = load('linux-vpn-gateway');
    const a = bind(text, facts);
    const b = bind(text, facts, { rulePriority: '22000' });
    expect(a.ok && b.ok).toBe(true);
    if (a.ok && b.ok) expect(a.hash).not.toBe(b.hash);
  });

  it('does not bind a class whose ingress interface the host lacks, and says which', () => {
    const { text, facts } = load('linux-vpn-gateway');
    const result = bind(text.replace('ingress: [vwl0]', 'ingress: [vwl9]'), facts);
    expect(result).toMatchObject({ ok: false, reason: 'BundleInvalidForHost' });
    if (!result.ok) {
      expect(result.message).toContain('ingress interface "vwl9" is not an interface of this host');
    }
    // A prefix selects what comes and goes (veth*): it binds without an interface yet.
    expect(bind(text.replace('ingress: [vwl0]', 'ingress: [vwl9*]'), facts).ok).toBe(true);
  });

  it('carries a tunnel found by its peer (macos-vpn-runner) to the agent, and refuses a match that is no address', () => {
    const { text, facts } = load('macos-vpn-runner');
    const bound = bind(text, facts);
    if (!bound.ok) throw new Error(bound.message);
    const wire = overTheWire(bound.bundle);
    const decoded = decodePolicyIr(wire.ir);
    expect(decoded.ok && decoded.ir.tunnelMatches).toEqual(
      requirePolicy(join(VALID, 'macos-vpn-runner', 'policy.yaml')).policy.tunnelMatches,
    );
    const onAgent = compileBundle(wire, facts);
    if (!onAgent.ok) throw new Error(onAgent.message);
    expect(onAgent.compiled.hash).toBe(bound.hash);
    const bad = JSON.parse(JSON.stringify(wire)) as {
      ir: { tunnelMatches: Record<string, { peer: string | null }> };
    };
    for (const match of Object.values(bad.ir.tunnelMatches)) match.peer = '10.8.0.1; flush';
    expect(decodePolicyIr(bad.ir)).toMatchObject({ ok: false });
  });

  it('refuses an IR a controller could abuse: names that would break out of a ruleset', () => {
    const { text, facts } = load('linux-vpn-gateway');
    const bound = bind(text, facts);
    if (!bound.ok) throw new Error(bound.message);
    const wire = JSON.parse(JSON.stringify(bound.bundle)) as { ir: { tunnels: string[] } };
    wire.ir.tunnels = ['tun0" } ; flush ruleset ; table inet x {'];
    expect(decodePolicyIr(wire.ir)).toMatchObject({ ok: false });
    const result = compileBundle({ ir: wire.ir, options: {} }, facts);
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.message).toMatch(/malformed at "tunnels\.0"/);
  });
});
