import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../src/prove/index.js';
import { HOST, createGatewayLab, liveStamp } from './support/vpn-gateway-lab.js';

// The README's "Programmatic API" blocks, run as written against the built package (`npm run
// build` first), imported by its own name as a user would: the first pure, the second applying
// to the gateway lab's host namespace (NETNS), with the root-namespace guard on.

const REPO = fileURLToPath(new URL('../../', import.meta.url));

function readmeBlocks(): string[] {
  const readme = readFileSync(`${REPO}README.md`, 'utf8');
  return [...readme.matchAll(/```js api\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
}

/** Joins the blocks into one module: the second uses the first's policy and facts. */
function asModule(blocks: readonly string[]): string {
  const imports = blocks.flatMap((b) => b.split('\n').filter((l) => l.startsWith('import ')));
  const bodies = blocks.map((b) =>
    b
      .split('\n')
      .filter((l) => !l.startsWith('import '))
      .join('\n'),
  );
  return [...new Set(imports), ...bodies].join('\n');
}

async function runModule(source: string, env: Record<string, string> = {}) {
  // Inside the package, so `import … from 'egressguard'` resolves to its own exports.
  const file = `${REPO}readme-api-${process.pid}-${Date.now()}.mjs`;
  writeFileSync(file, source);
  try {
    return await execa(process.execPath, [file], {
      cwd: REPO,
      env: { EGRESSGUARD_ROOTNS_GUARD: '1', ...env },
      reject: false,
      timeout: 60_000,
    });
  } finally {
    rmSync(file, { force: true });
  }
}

describe('README: programmatic API', () => {
  let lab: Lab;

  beforeAll(async () => {
    lab = await createGatewayLab();
  });

  afterAll(async () => {
    await lab.destroy();
  });

  it('has the two blocks the README promises', () => {
    expect(readmeBlocks()).toHaveLength(2);
  });

  it('checks, explains and compiles, touching nothing', async () => {
    const result = await runModule(asModule(readmeBlocks().slice(0, 1)));
    expect(result.stderr).toBe('');
    expect(result.exitCode).toBe(0);
    const [explained, compiled] = result.stdout.trim().split('\n');
    expect(explained).toBe('deny vpn/kill-switch routing + nftables');
    expect(compiled).toMatch(/^nftables ruleset\.nft, steering\.json, lockdown\.nft [0-9a-f]{12}$/);
  });

  it('plans and applies to a network namespace, and the table carries the hash', async () => {
    const result = await runModule(asModule(readmeBlocks()), { NETNS: lab.ns(HOST) });
    expect(result.stderr).toBe('');
    expect(result.exitCode).toBe(0);
    const lines = result.stdout.trim().split('\n');
    expect(lines[2]).toMatch(/^[1-9]\d* changes planned$/);
    expect(lines[3]).toMatch(/^generation 1 applied in /);
    const hash = /([0-9a-f]{12})$/.exec(lines[1] ?? '')?.[1];
    expect(hash).toBeDefined();
    expect(await liveStamp(lab)).toMatch(new RegExp(`^${hash ?? 'none'}`));
  });
});
