import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { packagePath } from '../core/index.js';
import { parseHostFacts } from '../facts/index.js';
import {
  BUNDLE_FORMAT,
  createHostIrBinder,
  createPolicyDocumentBinder,
  type HostIrBundle,
} from '../fleet/index.js';
import { createHostTarget } from '../host/index.js';
import { createFirewallEngine } from './firewall-engine.js';

const CASE = packagePath('testdata/policies/valid/linux-vpn-gateway');
const POLICY = readFileSync(join(CASE, 'policy.yaml'), 'utf8');
const FACTS = parseHostFacts(
  JSON.parse(readFileSync(join(CASE, 'facts.json'), 'utf8')),
  'facts.json',
);
const dir = mkdtempSync(join(tmpdir(), 'eg-firewall-engine-'));
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** The bundle a controller would send this host for a push with these backend options. */
function bundleFor(options: Record<string, string>): { bundle: HostIrBundle; hash: string } {
  const binder = createHostIrBinder();
  const prepared = binder.preparePolicy({
    text: POLICY,
    source: 'policy.yaml',
    pushId: 'p1',
    options,
  });
  if (!prepared.ok) throw new Error('the example policy does not validate');
  const bound = binder.bindHost(prepared.prepared, {
    hostName: FACTS.hostname,
    facts: FACTS,
    factsDigest: null,
    labels: {},
  });
  if (!bound.ok) throw new Error(bound.message);
  if (bound.bundle.format !== BUNDLE_FORMAT) throw new Error('not a host-IR bundle');
  return { bundle: bound.bundle, hash: bound.hash };
}

/** An engine for a namespace that is never touched: prepare only compiles and checks. */
function engine(own: Record<string, string> = {}) {
  return createFirewallEngine({
    target: createHostTarget({ netns: 'egtest-never-created', stateDir: dir, options: own }),
  });
}

describe('the firewall engine refuses what would write outside its own scope', () => {
  it('compiles a bundle for its own table to the controller’s hash', async () => {
    const { bundle, hash } = bundleFor({ rulePriority: '7400' });
    const outcome = await engine().prepare(bundle, FACTS);
    expect(outcome.ok && outcome.prepared.hash).toBe(hash);
  });

  it('refuses a bundle whose artifacts would write another table, and says which', async () => {
    const { bundle } = bundleFor({ table: 'filter' });
    expect(await engine().prepare(bundle, FACTS)).toEqual({
      ok: false,
      message:
        'Cannot apply a bundle that writes table inet filter: this agent owns table inet egressguard and writes nothing else (start the agent with that scope, or push without the option)',
    });
    // An agent started with its own table refuses a push that names the default one.
    const plain = bundleFor({ table: 'egressguard' }).bundle;
    const outcome = await engine({ table: 'eg_fleet' }).prepare(plain, FACTS);
    expect(outcome).toMatchObject({ ok: false });
    if (!outcome.ok) expect(outcome.message).toContain('this agent owns table inet eg_fleet');
  });

  it('refuses an option that would smuggle a ruleset into the table name', async () => {
    const { bundle } = bundleFor({});
    const outcome = await engine().prepare(
      { ...bundle, options: { table: 'x { }; flush ruleset; table inet y' } },
      FACTS,
    );
    expect(outcome.ok).toBe(false);
  });

  it('refuses a policy document: only the recording engine takes those', async () => {
    const binder = createPolicyDocumentBinder();
    const prepared = binder.preparePolicy({
      text: POLICY,
      source: 'p.yaml',
      pushId: 'p1',
      options: {},
    });
    if (!prepared.ok) throw new Error('invalid');
    const bound = binder.bindHost(prepared.prepared, {
      hostName: 'h',
      facts: FACTS,
      factsDigest: null,
      labels: {},
    });
    if (!bound.ok) throw new Error('unbound');
    const outcome = await engine().prepare(bound.bundle, FACTS);
    expect(outcome).toMatchObject({ ok: false });
    if (!outcome.ok)
      expect(outcome.message).toContain('this agent applies egressguard/bundle/host-ir-v1 bundles');
  });
});

describe('the firewall engine refuses options only the host sets', () => {
  const mac = packagePath('testdata/policies/valid/macos-runner-fleet');
  const macFacts = parseHostFacts(
    JSON.parse(readFileSync(join(mac, 'facts.json'), 'utf8')),
    'facts.json',
  );
  const macBundle = (options: Record<string, string>): HostIrBundle => {
    const binder = createHostIrBinder();
    const prepared = binder.preparePolicy({
      text: readFileSync(join(mac, 'policy.yaml'), 'utf8'),
      source: 'policy.yaml',
      pushId: 'p1',
      options: {},
    });
    if (!prepared.ok) throw new Error('the example policy does not validate');
    const bound = binder.bindHost(prepared.prepared, {
      hostName: macFacts.hostname,
      facts: macFacts,
      factsDigest: null,
      labels: {},
    });
    if (!bound.ok || bound.bundle.format !== BUNDLE_FORMAT) throw new Error('cannot bind');
    return { ...bound.bundle, options };
  };

  it('compiles a pf bundle without them, and refuses one that picks the pfctl root runs or the pf.conf it writes', async () => {
    expect((await engine().prepare(macBundle({}), macFacts)).ok).toBe(true);
    for (const [key, value] of [
      ['pfctl', '/tmp/not-pfctl'],
      ['pfConf', '/etc/sudoers'],
      ['pfAttach', 'stanza'],
      ['pfTokenFile', '/etc/passwd'],
    ] as const) {
      const outcome = await engine().prepare(macBundle({ [key]: value }), macFacts);
      expect(outcome).toMatchObject({ ok: false });
      if (!outcome.ok) expect(outcome.message).toContain(`sets "${key}"`);
    }
  });
});
