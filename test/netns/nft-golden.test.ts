import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRunner } from '../../src/runner/index.js';
import { REPO } from '../e2e-cli/run-cli.js';

const VALID = join(REPO, 'testdata/policies/valid');
const ns = `egtest-golden-${randomBytes(4).toString('hex')}`;
const root = createRunner();
const inside = root.inNamespace(ns);

describe('golden rulesets load in the real kernel', () => {
  beforeAll(async () => {
    await root.run(['ip', 'netns', 'add', ns], { effect: 'change' });
  });
  afterAll(async () => {
    await root.run(['ip', 'netns', 'delete', ns], { effect: 'change', allowFailure: true });
  });

  const files = readdirSync(VALID).flatMap((name) =>
    ['expected.nftables.ruleset.nft', 'expected.nftables.lockdown.nft']
      .map((f) => join(name, f))
      .filter((f) => existsSync(join(VALID, f))),
  );

  it('has goldens', () => {
    expect(files.length).toBeGreaterThan(3);
  });

  it.each(files)(
    '%s passes nft -c and loads twice (the transaction replaces itself)',
    async (file) => {
      const ruleset = readFileSync(join(VALID, file), 'utf8');
      const check = await inside.run(['nft', '-c', '-f', '-'], {
        effect: 'read',
        input: ruleset,
        allowFailure: true,
      });
      expect(check.stderr).toBe('');
      expect(check.exitCode).toBe(0);
      await inside.run(['nft', '-f', '-'], { effect: 'change', input: ruleset });
      await inside.run(['nft', '-f', '-'], { effect: 'change', input: ruleset });
      const tables = await inside.run(['nft', '-j', 'list', 'tables'], { effect: 'read' });
      expect(tables.stdout.match(/"name": ?"egressguard"/g)).toHaveLength(1);
    },
  );
});
