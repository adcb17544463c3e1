export { loadPolicy, parsePolicy, type ParseOptions, type ParseResult } from './parse-policy.js';
export { inlineListFiles } from './inline-list-files.js';
export {
  ISSUE_CODES,
  formatIssue,
  hasErrors,
  unreadablePolicy,
  type IssueCode,
  type PolicyIssue,
  type Severity,
} from './issue.js';
export type {
  Destination,
  Policy,
  PolicyClass,
  PodClass,
  PodProbe,
  PolicyRule,
  PortRange,
  Probe,
  Protocol,
  Requirement,
  TunnelMatch,
} from './policy.js';
export { policyJsonSchema } from './schema.js';
export { didYouMean } from './did-you-mean.js';
export { matchesInterface } from './interface-name.js';
export { hasPorts, parseProtocol, PROTOCOL_NAMES } from './protocol.js';
