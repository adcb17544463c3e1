import { formatAddress, type Prefix } from '../../core/index.js';
import { icmpCodeName, icmpTypeName } from './pf-services.js';
import {
  formatProtocol,
  type PfAddress,
  type PfBlockPolicy,
  type PfKernelEndpoint,
  type PfKernelRule,
  type PfLog,
  type PfPool,
  type PfPort,
  type PfTagged,
} from './pf-rules.js';

/**
 * One kernel rule as `pfctl -sr` / `-sn` / `-nv` prints it (MODEL of F93 pfctl_parser.c
 * print_rule, print_pool, print_fromto): keywords in pfctl's order, `all` for any-to-any,
 * `flags S/SA keep state` on stateful pass rules, ports and ICMP types as numbers or pfctl's
 * names. The text parses back to the same rule, which the corpus test relies on.
 */
export function formatPfRule(rule: PfKernelRule): string {
  const words: string[] = [];
  switch (rule.kind) {
    case 'filter':
      words.push(rule.action);
      if (rule.action === 'block' && rule.blockPolicy !== null) {
        words.push(formatBlock(rule.blockPolicy, rule.family));
      }
      if (rule.direction !== null) words.push(rule.direction);
      pushLog(words, rule.log);
      if (rule.quick) words.push('quick');
      pushInterface(words, rule);
      if (rule.route !== null) {
        words.push(rule.route.kind);
        if (rule.route.kind !== 'fastroute') {
          // print_pool: the interface alone when the pool address is zero, `(if addr)` else.
          const targets = rule.route.targets.map((t) =>
            t.address === null ? t.interface : `(${t.interface} ${formatPrefix(t.address)})`,
          );
          words.push(targets.length === 1 ? (targets[0] as string) : `{ ${targets.join(', ')} }`);
          pushPool(words, rule.route.pool);
        }
      }
      pushMatch(words, rule);
      if (rule.flags !== null) words.push('flags', `${rule.flags.set}/${rule.flags.mask}`);
      else if (
        rule.action === 'pass' &&
        (rule.protocol === null || rule.protocol === 6) &&
        !rule.fragment &&
        rule.state !== 'no'
      ) {
        words.push('flags any');
      }
      if (rule.icmpType !== null) {
        const family = rule.family === 6 ? 6 : 4;
        words.push(family === 6 ? 'icmp6-type' : 'icmp-type');
        words.push(icmpTypeName(rule.icmpType.type, family) ?? String(rule.icmpType.type));
        if (rule.icmpType.code !== null) {
          words.push(
            'code',
            icmpCodeName(rule.icmpType.type, rule.icmpType.code, family) ??
              String(rule.icmpType.code),
          );
        }
      }
      if (rule.tos !== null) words.push('tos', `0x${rule.tos.toString(16).padStart(2, '0')}`);
      if (rule.action === 'pass' && rule.state === 'no') words.push('no state');
      else if (rule.state !== 'no') words.push(`${rule.state} state`);
      if (rule.probability !== null) words.push('probability', formatProbability(rule.probability));
      {
        const options = [...rule.stateOptions];
        if (rule.stateBinding === 'if-bound') {
          // print_rule prints if-bound after overload, before sloppy and the timeouts.
          const after = options.findIndex((o) => /^(sloppy|pflow|\w+\.\w+ )/.test(o));
          options.splice(after < 0 ? options.length : after, 0, 'if-bound');
        }
        if (options.length > 0 && rule.state !== 'no') words.push(`(${options.join(', ')})`);
      }
      if (rule.fragment) words.push('fragment');
      if (rule.allowOpts) words.push('allow-opts');
      if (rule.label !== null) words.push('label', quote(rule.label));
      if (rule.tag !== null) words.push('tag', rule.tag);
      pushTagged(words, rule.tagged);
      if (rule.rtable !== null) words.push('rtable', String(rule.rtable));
      break;
    case 'nat':
    case 'rdr':
    case 'binat':
      if (rule.no) words.push('no');
      words.push(rule.kind);
      if (rule.pass) words.push('pass');
      pushLog(words, rule.log);
      pushInterface(words, rule);
      pushMatch(words, rule);
      if (rule.tag !== null) words.push('tag', rule.tag);
      pushTagged(words, rule.tagged);
      if (rule.redirect !== null) {
        words.push('->');
        const hosts = rule.redirect.hosts.map(formatAddressSpec);
        words.push(hosts.length === 1 ? (hosts[0] as string) : `{ ${hosts.join(', ')} }`);
        if (rule.redirect.port !== null) words.push('port', formatPortValue(rule.redirect.port));
        pushPool(words, rule.redirect.pool);
        if (rule.redirect.staticPort) words.push('static-port');
      }
      break;
    case 'anchor': {
      const keyword = rule.ruleset === 'filter' ? 'anchor' : `${rule.ruleset}-anchor`;
      words.push(keyword, quote(rule.wildcard ? `${rule.name}/*` : rule.name));
      if (rule.direction !== null) words.push(rule.direction);
      if (rule.quick) words.push('quick');
      pushInterface(words, rule);
      pushMatch(words, rule);
      // pfctl prints scrub anchors with the scrub defaults (`pfctl -sr` on stock macOS).
      if (rule.ruleset === 'scrub') words.push('fragment reassemble');
      if (rule.label !== null) words.push('label', quote(rule.label));
      pushTagged(words, rule.tagged);
      break;
    }
    case 'scrub': {
      if (rule.no) words.push('no');
      words.push('scrub');
      if (rule.direction !== null) words.push(rule.direction);
      pushLog(words, rule.log);
      pushInterface(words, rule);
      pushMatch(words, rule);
      const rank = (o: string): number =>
        ['no-df', 'random-id', 'min-ttl', 'max-mss', 'set-tos', 'reassemble'].findIndex((k) =>
          o.startsWith(k),
        );
      words.push(...[...rule.options].sort((a, b) => rank(a) - rank(b)));
      if (!rule.no) words.push('fragment', rule.fragments);
      break;
    }
  }
  return words.join(' ');
}

function formatBlock(policy: PfBlockPolicy, family: 4 | 6 | null): string {
  switch (policy.kind) {
    case 'drop':
    case 'return':
      return policy.kind;
    case 'return-rst':
      return policy.ttl === null ? 'return-rst' : `return-rst(ttl ${policy.ttl})`;
    case 'return-icmp': {
      const name = (value: number, f: 4 | 6): string =>
        icmpCodeName(value >> 8, value & 255, f) ?? String(value & 255);
      if (family === 4) return `return-icmp(${name(policy.icmp, 4)})`;
      if (family === 6) return `return-icmp6(${name(policy.icmp6, 6)})`;
      return `return-icmp(${name(policy.icmp, 4)}, ${name(policy.icmp6, 6)})`;
    }
  }
}

function pushLog(words: string[], log: PfLog | null): void {
  if (log === null) return;
  words.push('log');
  const opts = [
    ...(log.all ? ['all'] : []),
    ...(log.user ? ['user'] : []),
    ...(log.to !== 0 ? [`to pflog${log.to}`] : []),
  ];
  if (opts.length > 0) words.push(`(${opts.join(', ')})`);
}

function pushPool(words: string[], pool: PfPool): void {
  if (pool.type !== null) words.push(pool.type);
  if (pool.stickyAddress) words.push('sticky-address');
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

/** An address as pfctl prints it: `any`, `<table>`, `(en0)`, a host without `/32`, `a - b`. */
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
    case 'range':
      return `${formatPrefix(address.from)} - ${formatPrefix(address.to)}`;
    case 'interface': {
      const name = address.modifier === null ? address.name : `${address.name}:${address.modifier}`;
      const shown = address.dynamic ? `(${name})` : name;
      return address.mask === null ? shown : `${shown}/${address.mask}`;
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
  return port.op === ':' ? `${port.low}:${port.high || '*'}` : String(port.low);
}

/** print_rule: `%f` of the percentage, trailing zeros and point dropped. */
function formatProbability(p: number): string {
  return `${(p * 100).toFixed(6).replace(/0+$/, '').replace(/\.$/, '')}%`;
}

function quote(text: string): string {
  return `"${text.replace(/"/g, '\\"')}"`;
}
