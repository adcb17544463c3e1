import type { z } from 'zod';
import { closestName, didYouMean } from './did-you-mean.js';
import { formatPath } from './issue.js';
import type { IssueCollector, Path } from './locator.js';
import { describeAt, knownKeysAt } from './schema.js';

type ZodIssue = z.core.$ZodIssue;

const TYPE_NAMES: Readonly<Record<string, string>> = {
  object: 'a mapping',
  record: 'a mapping',
  array: 'a list',
  string: 'a string',
  number: 'a number',
  int: 'a whole number',
  boolean: 'true or false',
};

const PROTOCOL_HINT = 'use tcp, udp, icmp, gre, esp, ah, sctp or a number from 0 to 255';

/** Maps the schema validator's issues to policy issues with codes and positions. */
export function reportZodIssues(
  issues: readonly ZodIssue[],
  collector: IssueCollector,
  base: Path = [],
): void {
  for (const issue of issues) {
    const path: Path = [...base, ...(issue.path as (string | number)[])];
    // Issues inside a union branch carry no input: read it from the document.
    const value: unknown = 'input' in issue ? issue.input : collector.valueAt(path);
    reportIssue(issue, { path, value, collector });
  }
}

function reportIssue(
  issue: ZodIssue,
  ctx: { path: Path; value: unknown; collector: IssueCollector },
): void {
  const { path, value, collector } = ctx;
  const where = path.length === 0 ? 'the policy' : `"${formatPath(path)}"`;
  if (issue.code !== 'unrecognized_keys' && issue.code !== 'invalid_union' && value !== undefined) {
    if (reportPortOrProtocol(path, value, collector)) return;
  }
  switch (issue.code) {
    case 'unrecognized_keys':
      for (const key of issue.keys) {
        const known = knownKeysAt(path);
        const meant = closestName(key, known);
        if (meant === undefined) {
          collector.atKey(
            [...path, key],
            'unknown-field',
            `Unknown field "${key}" in ${where}: remove it, or use one of ${known.map((k) => `"${k}"`).join(', ')}`,
          );
        } else {
          collector.misspelled(
            [...path, key],
            meant,
            `Unknown field "${key}" in ${where} (did you mean "${meant}"?)`,
          );
        }
      }
      return;
    case 'invalid_type':
      if (value === undefined) {
        reportMissing(path, collector);
      } else {
        const expected = TYPE_NAMES[issue.expected] ?? issue.expected;
        collector.at(
          path,
          'invalid-type',
          `Expected ${expected} at ${where}, found ${show(value)}${listHint(issue.expected, value)}`,
        );
      }
      return;
    case 'invalid_value': {
      if (value === undefined) {
        reportMissing(path, collector);
        return;
      }
      const allowed = issue.values.map((v) => `"${String(v)}"`).join(', ');
      if (formatPath(path) === 'apiVersion') {
        collector.at(
          path,
          'api-version',
          `Unsupported apiVersion ${show(value)}: use "egressguard/v1", the only version this egressguard reads`,
        );
      } else {
        const suggestion =
          typeof value === 'string' ? didYouMean(value, issue.values.map(String)) : '';
        collector.at(
          path,
          'invalid-value',
          `Invalid value ${show(value)} at ${where}${suggestion}: use ${issue.values.length === 1 ? allowed : `one of ${allowed}`}`,
        );
      }
      return;
    }
    case 'invalid_union': {
      // Report the branch of the value's own type (a mapping with a typo, not "expected a list").
      const branch = issue.errors.find((errors) => !errors.some((e) => isTypeMismatch(e, value)));
      if (
        branch === undefined &&
        value !== undefined &&
        reportPortOrProtocol(path, value, collector)
      ) {
        return;
      }
      if (branch === undefined) {
        const expected = issue.errors
          .flatMap((errors) =>
            errors.flatMap((e) => (e.code === 'invalid_type' ? [e.expected] : [])),
          )
          .filter((v, i, all) => all.indexOf(v) === i)
          .map((v) => TYPE_NAMES[v] ?? v)
          .join(' or ');
        collector.at(
          path,
          'invalid-type',
          `Expected ${expected} at ${where}, found ${show(value)}${listHint(issue.errors.flat().some((e) => e.code === 'invalid_type' && e.expected === 'array') ? 'array' : '', value)}`,
        );
      } else {
        reportZodIssues(branch, collector, path);
      }
      return;
    }
    case 'too_small':
    case 'too_big': {
      const bound = issue.code === 'too_small' ? issue.minimum : issue.maximum;
      if (issue.origin === 'array' && issue.code === 'too_small') {
        collector.at(
          path,
          'invalid-value',
          `${capitalize(where)} is empty: list at least ${String(bound)} entr${bound === 1 ? 'y' : 'ies'}`,
        );
      } else if (issue.origin === 'string' && issue.code === 'too_small') {
        collector.at(path, 'invalid-value', `${capitalize(where)} is empty: write a value`);
      } else {
        collector.at(
          path,
          'invalid-value',
          `Value ${show(value)} at ${where} is too ${issue.code === 'too_small' ? 'small' : 'large'}: use ${issue.code === 'too_small' ? 'at least' : 'at most'} ${String(bound)}`,
        );
      }
      return;
    }
    case 'invalid_format':
      collector.at(
        path,
        'invalid-value',
        `Invalid value ${show(value)} at ${where}: ${issue.message}`,
      );
      return;
    default:
      collector.at(path, 'invalid-value', `Invalid value at ${where}: ${issue.message}`);
  }
}

/** Ports and protocols have codes of their own, whatever the schema found wrong with them. */
function reportPortOrProtocol(path: Path, value: unknown, collector: IssueCollector): boolean {
  const where = `"${formatPath(path)}"`;
  if (isPortPath(path)) {
    collector.at(
      path,
      'port-range',
      `Cannot use port ${show(value)} at ${where}: write a whole port (443)${path.at(-1) === 'port' ? '' : ' or an inclusive range ("30000-32767")'}`,
    );
    return true;
  }
  if (isProtocolPath(path)) {
    if (Array.isArray(value) && value.length === 0) {
      collector.at(
        path,
        'invalid-protocol',
        `The protocol list at ${where} is empty, so the rule would match nothing: list at least one protocol, or remove "proto" to match every IP protocol`,
      );
      return true;
    }
    if (typeof value === 'string' && /^(icmpv6|ipv6-icmp|icmp6)$/i.test(value)) {
      collector.at(
        path,
        'invalid-protocol',
        `Unknown protocol "${value}" at ${where}: write "icmp", which means ICMP for IPv4 and ICMPv6 for IPv6 destinations`,
      );
      return true;
    }
    const suggestion =
      typeof value === 'string'
        ? didYouMean(value, ['tcp', 'udp', 'icmp', 'gre', 'esp', 'ah', 'sctp'])
        : '';
    collector.at(
      path,
      'invalid-protocol',
      `Unknown protocol ${show(value)} at ${where}${suggestion}: ${PROTOCOL_HINT}`,
    );
    return true;
  }
  return false;
}

function reportMissing(path: Path, collector: IssueCollector): void {
  const field = String(path.at(-1));
  const parent = path.slice(0, -1);
  const where = parent.length === 0 ? 'the policy' : `"${formatPath(parent)}"`;
  if (formatPath(path) === 'apiVersion') {
    collector.atKey(
      parent,
      'missing-field',
      `Missing required field "apiVersion" in the policy: add "apiVersion: egressguard/v1"`,
    );
    return;
  }
  const description = describeAt(path);
  collector.atKey(
    parent,
    'missing-field',
    `Missing required field "${field}" in ${where}: add it${description === undefined ? '' : ` (${lowerFirst(description)})`}`,
    { absent: { object: parent, field } },
  );
}

/** Whether a union branch failed because the value is of another type altogether. */
function isTypeMismatch(issue: ZodIssue, value: unknown): boolean {
  if (issue.path.length > 0) return false;
  if (issue.code === 'invalid_type')
    return !(issue.expected === 'int' && typeof value === 'number');
  if (issue.code === 'invalid_value') return issue.values.every((v) => typeof v !== typeof value);
  if (issue.code === 'invalid_union') {
    return issue.errors.every((errors) => errors.some((e) => isTypeMismatch(e, value)));
  }
  return false;
}

function isPortPath(path: Path): boolean {
  return path.at(-1) === 'port' || (typeof path.at(-1) === 'number' && path.at(-2) === 'ports');
}

function isProtocolPath(path: Path): boolean {
  return path.at(-1) === 'proto' || (typeof path.at(-1) === 'number' && path.at(-2) === 'proto');
}

/** A scalar where a list belongs is the commonest slip: show the list it should be. */
function listHint(expected: string, value: unknown): string {
  return expected === 'array' && (typeof value === 'string' || typeof value === 'number')
    ? `: write a list, like [${String(value)}]`
    : '';
}

function show(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  if (typeof value === 'string') return `"${value}"`;
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') {
    return String(value);
  }
  return typeof value;
}

function capitalize(text: string): string {
  return text.startsWith('"') ? `Field ${text}` : text.charAt(0).toUpperCase() + text.slice(1);
}

function lowerFirst(text: string): string {
  return /^[A-Z][a-z]/.test(text) ? text.charAt(0).toLowerCase() + text.slice(1) : text;
}
