import type { CommandClass, CommandResult, Runner } from '../../runner/index.js';
import type { PfOptions } from './pf-options.js';

/**
 * The one way the pf backend runs pfctl: every call goes through the runner (which records it
 * for audits and applies the root-namespace guard) with the pfctl the options name. The host lock
 * is held by the apply layer around every apply, remove and restore.
 */
export interface Pfctl {
  /** Reads state (`-s…`, `-n`, `-T show`); a non-zero exit is returned, not thrown. */
  read(args: readonly string[], input?: string): Promise<CommandResult>;
  /** Changes state; throws `command-failed` with pfctl's message on a non-zero exit. */
  change(args: readonly string[], input?: string): Promise<CommandResult>;
  /** Changes state; a non-zero exit is returned, for the caller to judge. */
  tryChange(args: readonly string[], input?: string): Promise<CommandResult>;
}

export function createPfctl(runner: Runner, options: Pick<PfOptions, 'pfctl'>): Pfctl {
  const run = (
    args: readonly string[],
    effect: 'read' | 'change',
    allowFailure: boolean,
    input?: string,
  ) =>
    runner.run([options.pfctl, ...args], {
      effect,
      allowFailure,
      ...(input === undefined ? {} : { input }),
    });
  return {
    read: (args, input) => run(args, 'read', true, input),
    change: (args, input) => run(args, 'change', false, input),
    tryChange: (args, input) => run(args, 'change', true, input),
  };
}

// pfctl(8) options that take a value (F93 pfctl.c getopt string, plus Apple's -X TOKEN).
const WITH_VALUE = new Set(['a', 'D', 'f', 'F', 'k', 'K', 'L', 'o', 'p', 's', 't', 'T', 'x', 'X']);

/**
 * How a pfctl command line acts: `read` for shows, `-n` checks and `-T show`, else `change`,
 * whatever the program's path (a test's model of pfctl is recognised by the runner's injected
 * classifier, never here). Undefined when the program is not pfctl.
 */
export function classifyPfctlCommand(argv: readonly string[]): CommandClass | undefined {
  const program = argv[0] ?? '';
  const name = program.split('/').pop();
  if (name !== 'pfctl') return undefined;
  const letters = new Map<string, string>();
  for (let i = 1; i < argv.length; i++) {
    const arg = argv[i] ?? '';
    if (!arg.startsWith('-') || arg === '-') continue;
    for (let j = 1; j < arg.length; j++) {
      const letter = arg[j] ?? '';
      if (WITH_VALUE.has(letter)) {
        letters.set(letter, j < arg.length - 1 ? arg.slice(j + 1) : (argv[++i] ?? ''));
        break;
      }
      letters.set(letter, '');
    }
  }
  // Under -n pfctl opens /dev/pf read-only and loads nothing (NOTES.md §2, F93 pfctl.c:2193-2205).
  if (letters.has('n')) return 'read';
  const changes = ['f', 'F', 'k', 'K', 'e', 'E', 'd', 'X', 'x', 'D'];
  if (changes.some((l) => letters.has(l))) return 'change';
  if (letters.has('T')) return letters.get('T') === 'show' ? 'read' : 'change';
  return 'read';
}

/** The token `pfctl -E` prints (`Token : N`, on stderr, as scripts read it with `2>&1`). */
export function parseEnableToken(result: CommandResult): string | null {
  return /Token\s*:\s*(\d+)/.exec(`${result.stderr}\n${result.stdout}`)?.[1] ?? null;
}

/** The tokens `pfctl -s References` lists (one row per token: PID, name, token, timestamp). */
export function parseReferenceTokens(text: string): string[] {
  const tokens: string[] = [];
  for (const line of text.split('\n')) {
    const match = /^\s*\d+\s+.*?\s(\d{6,})\s/.exec(`${line} `);
    if (match?.[1] !== undefined) tokens.push(match[1]);
  }
  return tokens;
}

/** One rule line of `pfctl -sr`/`-sn`/`-vsr` output and its counters (with `-v`). */
export interface ShownRule {
  readonly text: string;
  readonly label: string | null;
  readonly evaluations: number;
  readonly packets: number;
  readonly bytes: number;
}

/** Parses `pfctl [-v] -s rules|nat` output (F93 pfctl_print_rule_counters for `-v`). */
export function parseShownRules(text: string): ShownRule[] {
  const rules: {
    text: string;
    label: string | null;
    evaluations: number;
    packets: number;
    bytes: number;
  }[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    if (/^\s+\[/.test(line)) {
      const last = rules[rules.length - 1];
      const counters = /Evaluations:\s*(\d+)\s+Packets:\s*(\d+)\s+Bytes:\s*(\d+)/.exec(line);
      if (last !== undefined && counters !== null) {
        last.evaluations = Number(counters[1]);
        last.packets = Number(counters[2]);
        last.bytes = Number(counters[3]);
      }
      continue;
    }
    const ruleText = line.replace(/^@\d+\s+/, '').trim();
    rules.push({
      text: ruleText,
      label: /\slabel "([^"]*)"/.exec(ruleText)?.[1] ?? null,
      evaluations: 0,
      packets: 0,
      bytes: 0,
    });
  }
  return rules;
}
