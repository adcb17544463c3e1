import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNonce, sendPackets, type Lab } from '../../src/prove/index.js';
import {
  HOST,
  POLICY_A,
  apply,
  cli,
  createGatewayLab,
  createTempDir,
  FACTS,
  countersGoneBack,
  ownTableJson,
  ownTableSnapshot,
  routingListing,
  status,
  target,
  writePolicyB,
} from './support/vpn-gateway-lab.js';

// Atomicity and ownership (DESIGN.md §4, §5): a ruleset the kernel rejects changes nothing live,
// and what egressguard does not own (another table, a foreign `ip rule`, a wg-quick-like routing
// table 51820) is untouched by apply, re-apply and remove. Real kernel, one lab per file.

const FOREIGN_NFT = `table inet foreign {
	set blocked {
		type ipv4_addr
		flags interval
		elements = { 192.0.2.0/28 }
	}
	chain guard {
		type filter hook forward priority filter + 10; policy accept;
		ip daddr @blocked counter drop comment "foreign: not ours"
	}
}
table ip foreign_nat {
	chain post {
		type nat hook postrouting priority srcnat + 10; policy accept;
		ip saddr 192.0.2.0/24 oifname "eth0" masquerade
	}
}
`;

/** Like wg-quick: a routing table 51820 and a rule into it, in both families. */
const FOREIGN_ROUTING: readonly (readonly string[])[] = [
  ['ip', '-4', 'route', 'add', 'default', 'via', '198.51.100.1', 'table', '51820'],
  ['ip', '-4', 'route', 'add', '192.0.2.128/25', 'dev', 'lan0', 'table', '51820'],
  ['ip', '-6', 'route', 'add', 'default', 'via', '2001:db8:ffff::1', 'table', '51820'],
  ['ip', '-4', 'rule', 'add', 'from', '192.0.2.0/24', 'lookup', '51820', 'priority', '100'],
  ['ip', '-6', 'rule', 'add', 'from', '2001:db8:99::/64', 'lookup', '51820', 'priority', '100'],
];

/**
 * Everything on the gateway that is not ours, in full: every nft table but ours (with set elements
 * and counters), every routing rule without our proto tag, every route of every table but ours.
 */
async function foreignState(lab: Lab): Promise<string> {
  const runner = lab.runner(HOST);
  const nft = await runner.run(['nft', '-j', 'list', 'ruleset'], { effect: 'read' });
  const objects = (
    JSON.parse(nft.stdout) as { nftables: Record<string, Record<string, unknown>>[] }
  ).nftables.filter((item) => {
    if ('metainfo' in item) return false;
    const body = Object.values(item)[0];
    const table = 'table' in item ? body?.['name'] : body?.['table'];
    return !(body?.['family'] === 'inet' && table === 'egressguard');
  });
  const lines = [JSON.stringify(objects)];
  for (const family of ['-4', '-6']) {
    const rules = await runner.run(['ip', family, 'rule', 'show'], { effect: 'read' });
    lines.push(...rules.stdout.split('\n').filter((l) => l !== '' && !l.includes('proto 104')));
    const routes = await runner.run(['ip', family, 'route', 'show', 'table', 'all'], {
      effect: 'read',
    });
    lines.push(...routes.stdout.split('\n').filter((l) => l !== '' && !l.includes('table 7350')));
  }
  return lines.join('\n');
}

describe('apply: atomicity and ownership', () => {
  let lab: Lab;
  const state = createTempDir('egtest-ownership');
  let before = '';

  beforeAll(async () => {
    lab = await createGatewayLab();
    const runner = lab.runner(HOST);
    await runner.run(['nft', '-f', '-'], { effect: 'change', input: FOREIGN_NFT });
    for (const argv of FOREIGN_ROUTING) await runner.run(argv, { effect: 'change' });
    before = await foreignState(lab);
    // The listing does show what it must leave alone.
    expect(before).toContain('"name":"foreign"');
    expect(before).toContain('lookup 51820');
    expect(before).toMatch(/default via 198\.51\.100\.1 dev eth0 table 51820/);
  });

  afterAll(async () => {
    await lab.destroy();
    state.dispose();
  });

  it('applies and re-applies without touching a foreign table, rule or routing table', async () => {
    const a = await apply(lab, state.path, POLICY_A);
    expect(a).toMatchObject({ changed: true, generation: 1 });
    expect(await foreignState(lab)).toBe(before);
    expect(await status(lab, state.path)).toMatchObject({ condition: 'InSync', liveHash: a.hash });

    const again = await apply(lab, state.path, POLICY_A);
    expect(again).toMatchObject({ changed: false, generation: 1, hash: a.hash });
    expect(await foreignState(lab)).toBe(before);

    const b = await apply(lab, state.path, writePolicyB(state.path));
    expect(b).toMatchObject({ changed: true, generation: 2 });
    expect(b.hash).not.toBe(a.hash);
    expect(await routingListing(lab, 7350)).toContain('throw 172.16.0.0/12 proto 104');
    expect(await foreignState(lab)).toBe(before);
    // Back to A for the next test.
    expect(await apply(lab, state.path, POLICY_A)).toMatchObject({ changed: true, generation: 3 });
  });

  it('leaves the live table exactly as it was when the kernel rejects the new ruleset', async () => {
    const policyB = writePolicyB(state.path);
    const live = await status(lab, state.path);
    expect(live).toMatchObject({ condition: 'InSync', exitCode: 0 });
    const tableBefore = await ownTableSnapshot(lab);
    const routingBefore = await routingListing(lab, 7350);
    // A router solicitation from the vpn workload, as its kernel sends on its own every few
    // seconds (see ownTableSnapshot): our input chain counts it while the apply runs. This one
    // makes that certain, so a counter that went on counting must not read as a change, and a
    // counter the failed apply had reset would read as one.
    await sendPackets(lab.runner('vpnwl'), {
      nonce: createNonce(),
      packets: [{ kind: 'icmp', icmpType: 133, src: 'fe80::5', dst: 'ff02::2', link: 'eth0' }],
    });

    const broken = await cli(['apply', policyB, '--facts', FACTS, ...target(lab, state.path)], {
      faults: 'compile.broken-ruleset=on',
    });
    expect(broken.exitCode).toBe(2);
    // nft's own message, through the runner's error.
    expect(broken.stderr).toMatch(
      /error: Cannot switch to the new table: the kernel rejected the swap transaction; nothing changed \(the staged sets were removed again\): Command "nft -f -" in namespace "\S+" failed with exit code 1: .*Error: Could not process rule: Too many links/s,
    );

    const tableAfter = await ownTableSnapshot(lab);
    // Set elements and handles included: not even reloaded.
    expect(tableAfter.ruleset).toBe(tableBefore.ruleset);
    expect(countersGoneBack(tableBefore, tableAfter)).toEqual([]);
    const solicited = 'counter n_vpn/neighbour-discovery';
    expect(tableAfter.counters.get(solicited)?.packets).toBeGreaterThan(
      tableBefore.counters.get(solicited)?.packets ?? Infinity,
    );
    expect(await routingListing(lab, 7350)).toBe(routingBefore);
    expect(await foreignState(lab)).toBe(before);
    const after = await status(lab, state.path);
    expect(after).toMatchObject({
      condition: 'InSync',
      exitCode: 0,
      liveHash: live.liveHash,
      appliedHash: live.appliedHash,
      generation: live.generation,
      attempt: null,
    });
    expect(after.live.fingerprint).toBe(live.live.fingerprint);

    // Without the fault the same policy goes in: the failure was the injected one.
    const b = await apply(lab, state.path, policyB);
    expect(b.changed).toBe(true);
    expect(await status(lab, state.path)).toMatchObject({ condition: 'InSync', liveHash: b.hash });
  });

  it('removes only what it owns', async () => {
    const removed = await cli(['remove', '--json', ...target(lab, state.path)]);
    expect(removed.exitCode).toBe(0);
    const { removed: what } = JSON.parse(removed.stdout) as { removed: string[] };
    expect(what).toEqual(
      expect.arrayContaining([
        'ip rule from 10.10.0.0/24 lookup 7350',
        'ip rule from 2001:db8:10::/64 lookup 7350',
        'table inet egressguard',
      ]),
    );
    expect(await ownTableJson(lab)).toBe('[]');
    const routing = await routingListing(lab, 7350);
    expect(routing).not.toContain('proto 104');
    expect(await foreignState(lab)).toBe(before);
    expect(await status(lab, state.path)).toMatchObject({ condition: 'NotApplied', exitCode: 3 });
  });

  it('leaves no table behind when the kernel rejects the first one', async () => {
    // After the removal above: the staging transactions create the table, the swap fails.
    expect(await ownTableJson(lab)).toBe('[]');
    const broken = await cli(['apply', POLICY_A, '--facts', FACTS, ...target(lab, state.path)], {
      faults: 'compile.broken-ruleset=on',
    });
    expect(broken.exitCode).toBe(2);
    expect(broken.stderr).toContain('nothing changed (the staged sets were removed again)');
    expect(await ownTableJson(lab)).toBe('[]');
    expect(await foreignState(lab)).toBe(before);
    expect(await status(lab, state.path)).toMatchObject({ condition: 'NotApplied', exitCode: 3 });
  });

  it('refuses to apply over a foreign rule at its priority, and changes nothing', async () => {
    const runner = lab.runner(HOST);
    await runner.run(
      ['ip', '-4', 'rule', 'add', 'from', '198.18.0.0/15', 'lookup', '51820', 'priority', '7350'],
      { effect: 'change' },
    );
    const occupied = await foreignState(lab);
    const refused = await cli(['apply', POLICY_A, '--facts', FACTS, ...target(lab, state.path)]);
    expect(refused.exitCode).toBe(2);
    expect(refused.stderr).toContain(
      'Cannot apply: routing state we do not own is in the way: IPv4 rule at priority 7350 (from 198.18.0.0 lookup 51820) is not ours: choose another priority (--rule-priority)',
    );
    expect(await ownTableJson(lab)).toBe('[]');
    expect(await routingListing(lab, 7350)).not.toContain('proto 104');
    expect(await foreignState(lab)).toBe(occupied);
    expect(await status(lab, state.path)).toMatchObject({ condition: 'NotApplied', attempt: null });
  });
});
