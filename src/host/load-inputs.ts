import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { EgressguardError } from '../core/index.js';
import { readHostFacts, type HostFacts } from '../facts/index.js';
import {
  formatIssue,
  hasErrors,
  loadPolicy,
  unreadablePolicy,
  type ParseResult,
  type Policy,
} from '../policy/index.js';

/** Loads a policy for work that needs a valid one; an invalid policy stops with its issues. */
export function requirePolicy(file: string): { policy: Policy; parsed: ParseResult } {
  const parsed = loadPolicy(file);
  const unreadable = unreadablePolicy(parsed.issues);
  if (unreadable !== undefined) throw new EgressguardError('io', unreadable.message);
  if (parsed.policy === undefined || hasErrors(parsed.issues)) {
    const errors = parsed.issues.filter((i) => i.severity === 'error');
    throw new EgressguardError(
      'policy-invalid',
      `Cannot use policy "${file}": it has ${errors.length} error${errors.length === 1 ? '' : 's'}:\n${errors.map(formatIssue).join('\n')}`,
      { hint: `run \`egressguard check ${file}\` for every problem` },
    );
  }
  return { policy: parsed.policy, parsed };
}

/** The facts file to use: the one given, else facts.json beside the policy. */
export function findFactsFile(
  policyFile: string,
  explicit: string | undefined,
): string | undefined {
  if (explicit !== undefined) return explicit;
  const beside = join(dirname(policyFile), 'facts.json');
  return existsSync(beside) ? beside : undefined;
}

/** The facts of a policy's host, from a file: the one given, or facts.json beside the policy. */
export function requireFacts(policyFile: string, explicit: string | undefined): HostFacts {
  const file = findFactsFile(policyFile, explicit);
  if (file === undefined) {
    throw new EgressguardError('usage', `Cannot find host facts for policy "${policyFile}"`, {
      hint: 'pass --facts FILE, or write them with `egressguard facts --json > facts.json` beside the policy',
    });
  }
  return readHostFacts(file);
}
