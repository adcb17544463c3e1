import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parseHostFacts, type HostFacts } from '../facts/index.js';
import { createHostTarget } from './host-target.js';
import { preparePolicy } from './prepare-policy.js';

const DIR = fileURLToPath(
  new URL('../../testdata/policies/valid/k3s-vpn-egress/', import.meta.url),
);
const POLICY = join(DIR, 'policy.yaml');
const UP = parseHostFacts(JSON.parse(readFileSync(join(DIR, 'facts.json'), 'utf8')), 'facts');
const DELETED: HostFacts = { ...UP, interfaces: UP.interfaces.filter((i) => i.name !== 'tun0') };
const state = mkdtempSync(join(tmpdir(), 'prepare-policy-'));
afterAll(() => {
  rmSync(state, { recursive: true, force: true });
});
// Facts are given, so nothing is read from a host.
const target = createHostTarget({ stateDir: state });

describe('preparePolicy with the facts of the last prepare (the resident)', () => {
  it('binds a tunnel deleted since as it was: an outage changes nothing that is enforced', async () => {
    const up = await preparePolicy(target, { policy: POLICY, facts: UP });
    const alone = await preparePolicy(target, { policy: POLICY, facts: DELETED });
    const kept = await preparePolicy(target, { policy: POLICY, facts: DELETED, previous: UP });
    // Without the last facts, the gateway's routing for tun0's address would go with tun0.
    expect(alone.hash).not.toBe(up.hash);
    expect(alone.ir.classes.map((c) => c.name)).toEqual([]);
    expect(kept.hash).toBe(up.hash);
    expect(kept.ir.classes.map((c) => c.name)).toEqual(['vpn.gateway']);
  });
});
