export { EgressguardError, isEgressguardError, type ErrorCode } from './errors.js';
export {
  type Family,
  type Prefix,
  type ParsedAddress,
  parseIpv4,
  parseIpv6,
  parseAddress,
  parsePrefix,
  prefixEnd,
  unmapIpv4,
  formatAddress,
  formatIpv4,
  formatIpv6,
} from './cidr.js';
export { AddressSet, AddressSetBuilder } from './address-set.js';
export { parsePrefixList, type PrefixListIssue } from './prefix-list.js';
export { createRandom } from './random.js';
export { packagePath } from './package-path.js';
export { createStepTimer, type StepTimer, type StepTimings } from './step-timer.js';
export { readBuildInfo, VERSION, type BuildInfo } from './version.js';
export { systemdCommandLine, systemdEnvironment, systemdQuote } from './systemd-quote.js';
export { createPcapReader, type PcapReader, type PcapRecord } from './pcap-reader.js';
export { escapeXml } from './escape-xml.js';
