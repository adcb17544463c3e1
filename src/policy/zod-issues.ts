import type { z } from 'zod';
import { didYouMean } from './did-you-mean.js';
import { formatPath } from './issue.js';
import type { IssueCollector, Path } from './locator.js';
import { knownKeysAt } from './schema.js';

type ZodIssue = z.core.$ZodIssue;

/** Maps the schema validator's issues to policy issues with codes and positions. */
export function reportZodIssues(
  issues: readonly ZodIssue[],
  collector: IssueCollector,
  base: Path = [],
): void {
  for (const issue of issues) {
    const path: Path = [...base, ...(issue.path as (string | number)[])];
    const where = path.length === 0 ? 'the policy' : `"${formatPath(path)}"`;
    switch (issue.code) {
      case 'unrecognized_keys':
        for (const key of issue.keys) {
          collector.atKey(
            [...path, key],
            'unknown-field',
            `Unknown field "${key}" in ${where}${didYouMean(key, knownKeysAt(path))}`,
          );
        }
        break;
      case 'invalid_type':
        if (issue.input === undefined) {
          collector.at(
            path,
            'missing-field',
            `Missing required field "${String(path.at(-1))}": add it to ${path.length > 1 ? `"${formatPath(path.slice(0, -1))}"` : 'the policy'}`,
          );
        } else {
          collector.at(
            path,
            'invalid-type',
            `Expected ${issue.expected} at ${where}, found ${describe(issue.input)}`,
          );
        }
        break;
      case 'invalid_value': {
        const allowed = issue.values.map((v) => `"${String(v)}"`).join(', ');
        if (formatPath(path) === 'apiVersion') {
          collector.at(
            path,
            'api-version',
            `Unsupported apiVersion ${describe(issue.input)}: this egressguard reads "egressguard/v1"`,
          );
        } else {
          collector.at(
            path,
            'invalid-value',
            `Invalid value ${describe(issue.input)} at ${where}: use one of ${allowed}${typeof issue.input === 'string' ? didYouMean(issue.input, issue.values.map(String)) : ''}`,
          );
        }
        break;
      }
      case 'invalid_union': {
        const branch = issue.errors.find(
          (errors) => !errors.some((e) => e.code === 'invalid_type' && e.path.length === 0),
        );
        if (branch === undefined) {
          const expected = issue.errors
            .flatMap((errors) =>
              errors.flatMap((e) => (e.code === 'invalid_type' ? [e.expected] : [])),
            )
            .filter((v, i, all) => all.indexOf(v) === i)
            .join(' or ');
          collector.at(
            path,
            'invalid-type',
            `Expected ${expected} at ${where}, found ${describe(issue.input)}`,
          );
        } else {
          reportZodIssues(branch, collector, path);
        }
        break;
      }
      default:
        collector.at(path, 'invalid-value', `Invalid value at ${where}: ${issue.message}`);
    }
  }
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  if (typeof value === 'string') return `"${value}"`;
  return `${typeof value} ${JSON.stringify(value)}`;
}
