import { formatAddress, type Prefix } from '../../core/index.js';
import {
  formatProtocol,
  type PfAddress,
  type PfKernelEndpoint,
  type PfKernelRule,
  type PfPort,
  type PfTagged,
} from './pf-rules.js';

/**
 * One kernel rule as `pfctl -sr` / `-sn` prints it (F93 pfctl_parser.c print_rule): keywords in
 * grammar order, `all` for any-to-any, `flags S/SA keep state` on stateful pass rules. The text
 * parses back to the same rule.
 */
export function formatPfRule(rule: PfKernelRule): string {
  const words: string[] = [];
  switch (rule.kind) {
    case 'filter':
      words.push(rule.action);
      if (rule.action === 'block' && rule.blockPolicy !== null) words.push(rule.blockPolicy);
      if (rule.direction !== null) words.push(rule.direction);
      if (rule.log) words.push('log');
      if (rule.quick) words.push('quick');
      pushInterface(words, rule);
      if (rule.route !== null) {
        words.push(rule.route.kind);
        // F93 pfctl_parser.c print_pool: the interface alone when the pool address is zero,
        // `(if addr)` otherwise; the forms parse.y's route_host reads back. (A rule with no
        // address family prints `(if any)`, PF_AZERO being false for af 0, as `pfctl -sr` on
        // macOS 14 shows for ioctl-built rules, mullvadvpn-app#7701; egressguard's route-to rules
        // always name their family.)
        const targets = rule.route.targets.map((t) =>
          t.address === null ? t.interface : `(${t.interface} ${formatPrefix(t.address)})`,
        );
        if (targets.length === 1) words.push(targets[0] as string);
        else if (targets.length > 1) words.push(`{ ${targets.join(', ')} }`);
      }
      pushMatch(words, rule);
      if (rule.flags !== null) words.push('flags', `${rule.flags.set}/${rule.flags.mask}`);
      if (rule.icmpType !== null) {
        words.push(rule.family === 6 ? 'icmp6-type' : 'icmp-type', String(rule.icmpType.type));
        if (rule.icmpType.code !== null) words.push('code', String(rule.icmpType.code));
      }
      if (rule.action === 'pass') {
        words.push(rule.state === 'no' ? 'no state' : `${rule.state} state`);
        if (rule.stateBinding !== null && rule.state !== 'no') words.push(`(${rule.stateBinding})`);
      }
      if (rule.label !== null) words.push('label', quote(rule.label));
      if (rule.tag !== null) words.push('tag', rule.tag);
      pushTagged(words, rule.tagged);
      break;
    case 'nat':
    case 'rdr':
    case 'binat':
      if (rule.no) words.push('no');
      words.push(rule.kind);
      if (rule.pass) words.push('pass');
      if (rule.log) words.push('log');
      pushInterface(words, rule);
      pushMatch(words, rule);
      if (rule.tag !== null) words.push('tag', rule.tag);
      pushTagged(words, rule.tagged);
      if (rule.redirect !== null) {
        words.push('->');
        const hosts = rule.redirect.hosts.map(formatAddressSpec);
        words.push(hosts.length === 1 ? (hosts[0] as string) : `{ ${hosts.join(', ')} }`);
        if (rule.redirect.port !== null) words.push('port', formatPortValue(rule.redirect.port));
        if (rule.redirect.staticPort) words.push('static-port');
      }
      break;
    case 'anchor': {
      const keyword = rule.ruleset === 'filter' ? 'anchor' : `${rule.ruleset}-anchor`;
      words.push(keyword, quote(rule.wildcard ? `${rule.name}/*` : rule.name));
      if (rule.direction !== null) words.push(rule.direction);
      pushInterface(words, rule);
      pushMatch(words, rule);
      // pfctl prints scrub anchors with the scrub defaults (`pfctl -sr` on stock macOS).
      if (rule.ruleset === 'scrub') words.push('fragment reassemble');
      pushTagged(words, rule.tagged);
      if (rule.label !== null) words.push('label', quote(rule.label));
      break;
    }
    case 'scrub':
      words.push('scrub');
      if (rule.direction !== null) words.push(rule.direction);
      pushInterface(words, rule);
      pushMatch(words, rule);
      if (rule.options !== '') words.push(rule.options);
      break;
  }
  return words.join(' ');
}

function pushInterface(words: string[], rule: PfKernelRule): void {
  if (rule.interface === null) return;
  words.push('on', rule.interface.negated ? `! ${rule.interface.name}` : rule.interface.name);
}

function pushMatch(words: string[], rule: PfKernelRule): void {
  if (rule.family !== null) words.push(rule.family === 4 ? 'inet' : 'inet6');
  if (rule.protocol !== null) words.push('proto', formatProtocol(rule.protocol));
  const isAny = (e: PfKernelEndpoint): boolean =>
    !e.negated && e.address.kind === 'any' && e.port === null;
  if (isAny(rule.from) && isAny(rule.to)) {
    words.push('all');
    return;
  }
  words.push('from', formatEndpoint(rule.from), 'to', formatEndpoint(rule.to));
}

function pushTagged(words: string[], tagged: PfTagged | null): void {
  if (tagged === null) return;
  if (tagged.negated) words.push('!');
  words.push('tagged', tagged.name);
}

function formatEndpoint(endpoint: PfKernelEndpoint): string {
  let text = (endpoint.negated ? '! ' : '') + formatAddressSpec(endpoint.address);
  if (endpoint.port !== null) text += ` port ${formatPort(endpoint.port)}`;
  return text;
}

/** An address as pfctl prints it: `any`, `<table>`, `(en0)`, a host without `/32`. */
export function formatAddressSpec(address: PfAddress): string {
  switch (address.kind) {
    case 'any':
    case 'self':
    case 'no-route':
    case 'urpf-failed':
      return address.kind;
    case 'table':
      return `<${address.name}>`;
    case 'prefix':
      return formatPrefix(address.prefix);
    case 'interface': {
      const name = address.modifier === null ? address.name : `${address.name}:${address.modifier}`;
      return address.dynamic ? `(${name})` : name;
    }
  }
}

export function formatPrefix(prefix: Prefix): string {
  const address = formatAddress(prefix.family, prefix.start);
  const host = prefix.family === 4 ? 32 : 128;
  return prefix.length === host ? address : `${address}/${prefix.length}`;
}

function formatPort(port: PfPort): string {
  switch (port.op) {
    case ':':
      return `${port.low}:${port.high}`;
    case '><':
    case '<>':
      return `${port.low} ${port.op} ${port.high}`;
    default:
      return `${port.op} ${port.low}`;
  }
}

function formatPortValue(port: PfPort): string {
  return port.op === ':' ? `${port.low}:${port.high}` : String(port.low);
}

function quote(text: string): string {
  return `"${text.replace(/"/g, '\\"')}"`;
}
