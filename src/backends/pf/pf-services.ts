/**
 * The name tables pfctl looks names up in, as a MODEL gives them: getservbyname(3) over
 * /etc/services (IANA's assignments, as BSD systems ship them), and pfctl's own ICMP type and
 * code names (F93 pfctl_parser.c icmp_type, icmp6_type, icmp_code, icmp6_code). A service name
 * outside this table is refused as "not modelled", not as an unknown port: the real table is
 * larger and the model cannot tell.
 */
export const SERVICES: Readonly<Record<string, number>> = {
  tcpmux: 1,
  compressnet: 2,
  echo: 7,
  discard: 9,
  daytime: 13,
  'ftp-data': 20,
  ftp: 21,
  ssh: 22,
  telnet: 23,
  smtp: 25,
  time: 37,
  whois: 43,
  domain: 53,
  bootps: 67,
  bootpc: 68,
  tftp: 69,
  gopher: 70,
  finger: 79,
  http: 80,
  www: 80,
  kerberos: 88,
  pop3: 110,
  sunrpc: 111,
  auth: 113,
  nntp: 119,
  ntp: 123,
  'netbios-ns': 137,
  'netbios-dgm': 138,
  'netbios-ssn': 139,
  imap: 143,
  snmp: 161,
  'snmp-trap': 162,
  bgp: 179,
  irc: 194,
  ldap: 389,
  https: 443,
  'microsoft-ds': 445,
  isakmp: 500,
  syslog: 514,
  submission: 587,
  ldaps: 636,
  imaps: 993,
  pop3s: 995,
  pip: 321,
  socks: 1080,
  openvpn: 1194,
  'ms-sql-s': 1433,
  radius: 1812,
  nfsd: 2049,
  mysql: 3306,
  rdp: 3389,
  'ipsec-nat-t': 4500,
  'personal-agent': 5555,
  postgresql: 5432,
  ircd: 6667,
};

const ICMP_TYPE_NAMES: readonly (readonly [string, number])[] = [
  ['echoreq', 8],
  ['echorep', 0],
  ['unreach', 3],
  ['squench', 4],
  ['redir', 5],
  ['althost', 6],
  ['routeradv', 9],
  ['routersol', 10],
  ['timex', 11],
  ['paramprob', 12],
  ['timereq', 13],
  ['timerep', 14],
  ['inforeq', 15],
  ['inforep', 16],
  ['maskreq', 17],
  ['maskrep', 18],
  ['trace', 30],
  ['dataconv', 31],
  ['mobredir', 32],
  ['ipv6-where', 33],
  ['ipv6-here', 34],
  ['mobregreq', 35],
  ['mobregrep', 36],
  ['skip', 39],
  ['photuris', 40],
];

const ICMP6_TYPE_NAMES: readonly (readonly [string, number])[] = [
  ['unreach', 1],
  ['toobig', 2],
  ['timex', 3],
  ['paramprob', 4],
  ['echoreq', 128],
  ['echorep', 129],
  ['groupqry', 130],
  ['listqry', 130],
  ['grouprep', 131],
  ['listenrep', 131],
  ['groupterm', 132],
  ['listendone', 132],
  ['routersol', 133],
  ['routeradv', 134],
  ['neighbrsol', 135],
  ['neighbradv', 136],
  ['redir', 137],
  ['routrrenum', 138],
  ['wrureq', 139],
  ['wrurep', 140],
  ['fqdnreq', 139],
  ['fqdnrep', 140],
  ['niqry', 139],
  ['nirep', 140],
  ['mtraceresp', 200],
  ['mtrace', 201],
];

/** [name, type, code] */
const ICMP_CODE_NAMES: readonly (readonly [string, number, number])[] = [
  ['net-unr', 3, 0],
  ['host-unr', 3, 1],
  ['proto-unr', 3, 2],
  ['port-unr', 3, 3],
  ['needfrag', 3, 4],
  ['srcfail', 3, 5],
  ['net-unk', 3, 6],
  ['host-unk', 3, 7],
  ['isolate', 3, 8],
  ['net-prohib', 3, 9],
  ['host-prohib', 3, 10],
  ['net-tos', 3, 11],
  ['host-tos', 3, 12],
  ['filter-prohib', 3, 13],
  ['host-preced', 3, 14],
  ['cutoff-preced', 3, 15],
  ['redir-net', 5, 0],
  ['redir-host', 5, 1],
  ['redir-tos-net', 5, 2],
  ['redir-tos-host', 5, 3],
  ['normal-adv', 9, 0],
  ['common-adv', 9, 16],
  ['transit', 11, 0],
  ['reassemb', 11, 1],
  ['badhead', 12, 0],
  ['optmiss', 12, 1],
  ['badlen', 12, 2],
  ['unknown-ind', 40, 1],
  ['auth-fail', 40, 2],
  ['decrypt-fail', 40, 3],
];

const ICMP6_CODE_NAMES: readonly (readonly [string, number, number])[] = [
  ['admin-unr', 1, 1],
  ['noroute-unr', 1, 0],
  ['notnbr-unr', 1, 2],
  ['beyond-unr', 1, 2],
  ['addr-unr', 1, 3],
  ['port-unr', 1, 4],
  ['transit', 3, 0],
  ['reassemb', 3, 1],
  ['badhead', 4, 0],
  ['nxthdr', 4, 1],
  ['redironlink', 137, 0],
  ['redirrouter', 137, 1],
];

/** An ICMP (family 4) or ICMPv6 (6) type by name (F93 geticmptypebyname). */
export function icmpTypeByName(name: string, family: 4 | 6): number | undefined {
  return (family === 4 ? ICMP_TYPE_NAMES : ICMP6_TYPE_NAMES).find(([n]) => n === name)?.[1];
}

/** An ICMP code by name, within a type (F93 geticmpcodebyname). */
export function icmpCodeByName(type: number, name: string, family: 4 | 6): number | undefined {
  return (family === 4 ? ICMP_CODE_NAMES : ICMP6_CODE_NAMES).find(
    ([n, t]) => n === name && t === type,
  )?.[2];
}

/** The name pfctl prints for an ICMP type (F93 geticmptypebynumber), if it has one. */
export function icmpTypeName(type: number, family: 4 | 6): string | undefined {
  return (family === 4 ? ICMP_TYPE_NAMES : ICMP6_TYPE_NAMES).find(([, t]) => t === type)?.[0];
}

/** The name pfctl prints for an ICMP code (F93 geticmpcodebynumber), if it has one. */
export function icmpCodeName(type: number, code: number, family: 4 | 6): string | undefined {
  return (family === 4 ? ICMP_CODE_NAMES : ICMP6_CODE_NAMES).find(
    ([, t, c]) => t === type && c === code,
  )?.[0];
}
