/**
 * Whether a command line only reads state. Anything not recognised here counts as a change, so the
 * root-namespace guard fails closed on commands it does not know.
 */
export function isReadOnlyCommand(argv: readonly string[]): boolean {
  const [cmd, ...args] = argv;
  const name = cmd?.split('/').pop();
  switch (name) {
    case 'nft':
      return args.some((a) => ['list', 'monitor', '-c', '--check', '-v', '--version'].includes(a));
    case 'ip':
      return isReadOnlyIp(args);
    case 'tc':
      return isReadOnlyTc(args);
    case 'pfctl':
      return args.some((a) => a === '-n' || a.startsWith('-s') || a.startsWith('-vs'));
    case 'sysctl':
      return !args.some((a) => a === '-w' || a.includes('='));
    case 'conntrack':
      return args.some((a) => a === '-L' || a === '--dump' || a === '-E' || a === '--event');
    case 'tcpdump':
    case 'ping':
    case 'uname':
    case 'cat':
    case 'true':
    case 'systemd-analyze':
    case 'aclgen':
    case 'sw_vers':
      return true;
    default:
      return false;
  }
}

const IP_READ_VERBS = new Set(['show', 'list', 'ls', 'lst', 'get']);

function isReadOnlyIp(args: readonly string[]): boolean {
  const words = args.filter((a) => !a.startsWith('-'));
  if (args.includes('-V') || args.includes('-Version')) return true;
  // `ip xfrm policy show`: xfrm has objects of its own, so its verb comes one word later.
  const [object, verb] = words[0] === 'xfrm' ? words.slice(1) : words;
  if (object === undefined) return false;
  if (object === 'monitor') return true;
  if (verb === undefined) return true; // `ip -j addr` lists
  return IP_READ_VERBS.has(verb);
}

const TC_READ_VERBS = new Set(['show', 'list', 'ls']);

/** `tc [-j] qdisc show …`, `tc filter show dev X ingress`: the verb follows the object. */
function isReadOnlyTc(args: readonly string[]): boolean {
  const words = args.filter((a) => !a.startsWith('-'));
  if (args.includes('-V') || args.includes('-Version')) return true;
  const verb = words[1];
  return verb !== undefined && TC_READ_VERBS.has(verb);
}

/**
 * Whether a command line names its own network namespace (`ip -n NAME …`, `ip netns …`), so it
 * does not act on the namespace it runs in. Creating and deleting namespaces is how labs start.
 */
export function targetsNamedNamespace(argv: readonly string[]): boolean {
  const [cmd, ...args] = argv;
  if (cmd?.split('/').pop() !== 'ip') return false;
  const first = args.findIndex((a) => !a.startsWith('-'));
  if (args.slice(0, first === -1 ? args.length : first).some((a) => a === '-n' || a === '-netns'))
    return true;
  const object = args[first];
  const verb = args[first + 1];
  return object === 'netns' && verb !== 'exec';
}
