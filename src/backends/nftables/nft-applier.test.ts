import { describe, expect, it } from 'vitest';
import { planLoad, type LiveObject } from './nft-applier.js';

const big = Array.from({ length: 30_000 }, (_, i) => `10.${i >> 8}.${i & 255}.0/32`).join(
  ',\n\t\t\t     ',
);
const RULESET = `# compiled
table inet eg {}
delete table inet eg
table inet eg {
\tset stamp {
\t\ttype ipv4_addr
\t\tcomment "eg-hash:1 policy p"
\t}

\tcounter n_a {
\t\tcomment "a"
\t}

\tset s_src4_aaaaaaaaaaaa {
\t\ttype ipv4_addr
\t\tflags interval
\t\telements = { 10.0.0.0/24 }
\t}

\tset s_big4_p0_bbbbbbbbbbbb {
\t\ttype ipv4_addr
\t\tflags interval
\t\telements = { ${big} }
\t}

\tset s_big4_p1_cccccccccccc {
\t\ttype ipv4_addr
\t\tflags interval
\t\telements = { ${big.replaceAll('10.', '11.')} }
\t}

\tchain forward {
\t\ttype filter hook forward priority filter; policy accept;
\t\tip saddr != @s_src4_aaaaaaaaaaaa counter name n_a drop comment "a"
\t}
}
`;

const live = (...objects: [string, string][]): LiveObject[] =>
  objects.map(([kind, name]) => ({
    kind,
    body: kind === 'set' ? { name, type: 'ipv4_addr', flags: ['interval'] } : { name },
  }));

describe('planLoad', () => {
  it('stages every set of a new table, big ones in parallel, and defines the rest at once', () => {
    const plan = planLoad(RULESET, 'eg', [], { parallel: 2 });
    expect(plan.staged).toHaveLength(2);
    expect(plan.staged.flat().sort()).toEqual([
      's_big4_p0_bbbbbbbbbbbb',
      's_big4_p1_cccccccccccc',
      's_src4_aaaaaaaaaaaa',
    ]);
    // The two big shards load side by side.
    expect(plan.staged.map((names) => names.filter((n) => n.startsWith('s_big')).length)).toEqual([
      1, 1,
    ]);
    for (const stage of plan.stage) {
      expect(stage.startsWith('table inet eg {\n\tset ')).toBe(true);
      expect(stage).not.toMatch(/delete|flush|chain/);
    }
    expect(plan.swap).toMatch(
      /^table inet eg \{\}\nflush table inet eg\ntable inet eg \{\n\tset stamp/,
    );
    expect(plan.swap).toContain('\tcounter n_a {');
    expect(plan.swap).toContain('\tchain forward {');
    expect(plan.swap).not.toContain('\tset s_');
    expect(plan.swap).not.toContain('delete table');
  });

  it('leaves live sets alone, stages the others, and deletes what the new table lacks', () => {
    const plan = planLoad(
      RULESET,
      'eg',
      live(
        ['set', 'stamp'],
        ['set', 's_src4_aaaaaaaaaaaa'],
        ['set', 's_big4_p0_000000000000'],
        ['counter', 'n_a'],
        ['counter', 'n_gone'],
        ['chain', 'forward'],
        ['chain', 'c_gone'],
      ),
      { parallel: 4 },
    );
    expect(plan.staged.flat().sort()).toEqual(['s_big4_p0_bbbbbbbbbbbb', 's_big4_p1_cccccccccccc']);
    expect(plan.stage).toHaveLength(2);
    expect(plan.swap.split('\ntable inet eg {\n')[0]?.split('\n')).toEqual([
      'table inet eg {}',
      'flush table inet eg',
      'delete set inet eg stamp',
      'delete set inet eg s_big4_p0_000000000000',
      'delete counter inet eg n_gone',
      'delete chain inet eg c_gone',
    ]);
    expect(plan.swap).not.toContain('\tset s_');
  });

  it('with force refills the live sets in the swap instead of trusting their names', () => {
    const plan = planLoad(RULESET, 'eg', live(['set', 's_src4_aaaaaaaaaaaa']), { force: true });
    expect(plan.swap).toContain('flush set inet eg s_src4_aaaaaaaaaaaa\n');
    expect(plan.swap).toContain('\tset s_src4_aaaaaaaaaaaa {');
    expect(plan.staged.flat()).not.toContain('s_src4_aaaaaaaaaaaa');
  });

  it('keeps small staging in one transaction', () => {
    const small = RULESET.replace(
      /\n\n\tset s_big4_p0[\s\S]*?\n\t\}\n\n\tset s_big4_p1[\s\S]*?\n\t\}/,
      '',
    );
    expect(planLoad(small, 'eg', [], { parallel: 8 }).stage).toHaveLength(1);
  });

  it('refuses a ruleset that is not a compiled one', () => {
    expect(() => planLoad('table inet other {\n}\n', 'eg', [])).toThrow(
      /definition of table inet eg/,
    );
    expect(() => planLoad('x\ntable inet eg {\n\trule\n}\n', 'eg', [])).toThrow(
      /Cannot read a block/,
    );
  });

  it('recreates in the swap a live set of the right name and another type', () => {
    const plan = planLoad(RULESET, 'eg', [
      {
        kind: 'set',
        body: { name: 's_src4_aaaaaaaaaaaa', type: 'ipv6_addr', flags: ['interval'] },
      },
    ]);
    expect(plan.swap).toContain('delete set inet eg s_src4_aaaaaaaaaaaa\n');
    expect(plan.swap).toContain('\tset s_src4_aaaaaaaaaaaa {');
    expect(plan.sets).toContainEqual({
      name: 's_src4_aaaaaaaaaaaa',
      action: 'recreate',
      elements: 1,
    });
  });

  it('says what happens to each set, with its element count', () => {
    const plan = planLoad(
      RULESET,
      'eg',
      live(['set', 's_src4_aaaaaaaaaaaa'], ['set', 's_old_000000000000']),
    );
    expect(plan.sets).toEqual([
      { name: 's_old_000000000000', action: 'delete', elements: 0 },
      { name: 's_big4_p0_bbbbbbbbbbbb', action: 'stage', elements: 30_000 },
      { name: 's_big4_p1_cccccccccccc', action: 'stage', elements: 30_000 },
    ]);
  });
});
