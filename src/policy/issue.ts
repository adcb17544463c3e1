/** Every problem a policy can have, by stable code. Each has a case in testdata/policies/invalid. */
export const ISSUE_CODES = {
  // errors
  'yaml-syntax': 'error',
  'duplicate-key': 'error',
  'api-version': 'error',
  'unknown-field': 'error',
  'missing-field': 'error',
  'invalid-type': 'error',
  'invalid-value': 'error',
  'malformed-cidr': 'error',
  'malformed-address': 'error',
  'unknown-network': 'error',
  'domain-name': 'error',
  'network-cycle': 'error',
  'unreadable-file': 'error',
  'unknown-interface': 'error',
  'invalid-interface-name': 'error',
  'missing-ingress': 'error',
  'ingress-on-host-class': 'error',
  'source-overlap': 'error',
  'ingress-overlap': 'error',
  'tunnel-class-without-tunnel': 'error',
  'kill-switch-on-uplink': 'error',
  'kill-switch-audit': 'error',
  'unsteerable-ipv6': 'error',
  'duplicate-id': 'error',
  'invalid-protocol': 'error',
  'port-range': 'error',
  'ports-without-protocol': 'error',
  'misplaced-keyword': 'error',
  'probe-mismatch': 'error',
  'ipv6-block-with-ipv6-sources': 'error',
  'kill-switch-covers-everything': 'error',
  'ingress-on-exit': 'error',
  'host-field-in-pod-class': 'error',
  'empty-pod-selector': 'error',
  'invalid-label': 'error',
  'pod-selector-overlap': 'error',
  'self-in-pod-class': 'error',
  'unknown-pod-class': 'error',
  'probe-source': 'error',
  'empty-tunnel-match': 'error',
  // A prefix with host bits widens the match beyond the address written (10.0.5.10/8 is all of
  // 10/8): in a policy almost always a typo, and widening an allow or a kill-switch exception
  // leaks. In a list file (often a downloaded feed) it is the source's sloppiness: a warning.
  'host-bits': 'error',
  // warnings
  'shadowed-rule': 'warning',
  'unreachable-family': 'warning',
  'tunnel-without-kill-switch': 'warning',
  'empty-network': 'warning',
  'host-bits-in-list': 'warning',
  'ipv4-mapped-address': 'warning',
  'dhcp-to-host-denied': 'warning',
  'ingress-not-on-host': 'warning',
  'masquerade-without-address': 'warning',
} as const;

export type IssueCode = keyof typeof ISSUE_CODES;
export type Severity = 'error' | 'warning';

/** A problem in a policy, as data (never thrown), pointing at the exact place. */
export interface PolicyIssue {
  readonly code: IssueCode;
  readonly severity: Severity;
  readonly file: string;
  /** 1-based. */
  readonly line: number;
  /** 1-based. */
  readonly column: number;
  /** Dotted path in the document, e.g. classes.vm.rules[2].ports[0]. */
  readonly path: string;
  readonly message: string;
}

/** `FILE:LINE:COL: error CODE: message`, one line per issue. */
export function formatIssue(issue: PolicyIssue): string {
  return `${issue.file}:${issue.line}:${issue.column}: ${issue.severity} ${issue.code}: ${issue.message}`;
}

export function hasErrors(issues: readonly PolicyIssue[]): boolean {
  return issues.some((i) => i.severity === 'error');
}

/**
 * The issue saying the policy file itself could not be read (reported at its root, path ""): a
 * runtime failure, which commands exit 2 for. A network list the policy names that cannot be
 * read is the policy's fault (a wrong path in it), reported where it is named.
 */
export function unreadablePolicy(issues: readonly PolicyIssue[]): PolicyIssue | undefined {
  return issues.find((i) => i.code === 'unreadable-file' && i.path === '');
}

export function formatPath(path: readonly (string | number)[]): string {
  let out = '';
  for (const segment of path) {
    if (typeof segment === 'number') out += `[${segment}]`;
    else out += out === '' ? segment : `.${segment}`;
  }
  return out;
}
