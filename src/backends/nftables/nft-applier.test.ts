import { describe, expect, it } from 'vitest';
import { planLoad, type LiveObject } from './nft-applier.js';
import { definitionHash, setBlock } from './nft-sets.js';

/** A set named as the compiler names it: its base, then the hash of its definition. */
function set(base: string, comment: string, elements: readonly string[]) {
  const definition = `\t\ttype ipv4_addr\n\t\tflags interval\n\t\tcomment "${comment}"\n\t\telements = { ${elements.join(',\n\t\t\t     ')} }`;
  const name = `${base}_${definitionHash(definition)}`;
  return { name, text: setBlock(name, definition) };
}

const hosts = (first: number) =>
  Array.from({ length: 30_000 }, (_, i) => `${first}.${i >> 8}.${i & 255}.0/32`);
const SRC = set('s_src4', 'class c sources', ['10.0.0.0/24']);
const BIG0 = set('s_big4_p0', 'rule deny-big', hosts(10));
const BIG1 = set('s_big4_p1', 'rule deny-big', hosts(11));
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

${SRC.text}

${BIG0.text}

${BIG1.text}

\tchain forward {
\t\ttype filter hook forward priority filter; policy accept;
\t\tip saddr != @${SRC.name} counter name n_a drop comment "a"
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
    expect(plan.staged.flat().sort()).toEqual([BIG0.name, BIG1.name, SRC.name].sort());
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

  it('keeps a live set named by its content, stages the others, deletes what is gone', () => {
    const plan = planLoad(
      RULESET,
      'eg',
      live(
        ['set', 'stamp'],
        ['set', BIG0.name],
        ['set', 's_big4_p1_000000000000'],
        ['counter', 'n_a'],
        ['counter', 'n_gone'],
        ['chain', 'forward'],
        ['chain', 'c_gone'],
      ),
      { parallel: 4 },
    );
    expect(plan.staged.flat().sort()).toEqual([BIG1.name, SRC.name].sort());
    expect(plan.swap.split('\ntable inet eg {\n')[0]?.split('\n')).toEqual([
      'table inet eg {}',
      'flush table inet eg',
      'delete set inet eg stamp',
      'delete set inet eg s_big4_p1_000000000000',
      'delete counter inet eg n_gone',
      'delete chain inet eg c_gone',
    ]);
    expect(plan.swap).not.toContain(`\tset ${BIG0.name} {`);
    expect(plan.sets).toEqual([
      { name: 's_big4_p1_000000000000', action: 'delete', elements: 0 },
      { name: SRC.name, action: 'stage', elements: 1 },
      { name: BIG1.name, action: 'stage', elements: 30_000 },
    ]);
  });

  it('refills a live class set at every apply: an element slipped into one is undone', () => {
    const plan = planLoad(RULESET, 'eg', live(['set', SRC.name], ['set', BIG0.name]));
    expect(plan.swap).toContain(`flush set inet eg ${SRC.name}\n`);
    expect(plan.swap).toContain(`\tset ${SRC.name} {`);
    expect(plan.swap).not.toContain(`flush set inet eg ${BIG0.name}`);
    expect(plan.sets).toContainEqual({ name: SRC.name, action: 'refill', elements: 1 });
  });

  it('refills a live set whose name is not the hash of the content wanted', () => {
    // A generation written before names carried a hash, restored over a live one of its names.
    const old = RULESET.replaceAll(BIG0.name, 's_big4_p0');
    const plan = planLoad(old, 'eg', live(['set', 's_big4_p0']));
    expect(plan.swap).toContain('flush set inet eg s_big4_p0\n');
    expect(plan.sets).toContainEqual({ name: 's_big4_p0', action: 'refill', elements: 30_000 });
  });

  it('with force refills every live set in the swap', () => {
    const plan = planLoad(RULESET, 'eg', live(['set', BIG0.name]), { force: true });
    expect(plan.swap).toContain(`flush set inet eg ${BIG0.name}\n`);
    expect(plan.swap).toContain(`\tset ${BIG0.name} {`);
    expect(plan.staged.flat()).not.toContain(BIG0.name);
  });

  it('recreates in the swap a live set of the right name and another type', () => {
    const plan = planLoad(RULESET, 'eg', [
      { kind: 'set', body: { name: BIG0.name, type: 'ipv6_addr', flags: ['interval'] } },
    ]);
    expect(plan.swap).toContain(`delete set inet eg ${BIG0.name}\n`);
    expect(plan.swap).toContain(`\tset ${BIG0.name} {`);
    expect(plan.sets).toContainEqual({ name: BIG0.name, action: 'recreate', elements: 30_000 });
  });

  it('keeps small staging in one transaction', () => {
    const small = RULESET.replace(`\n\n${BIG0.text}`, '').replace(`\n\n${BIG1.text}`, '');
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
});
