import { delimiter, resolve } from 'node:path';

/**
 * What a command line does: only reads state, changes it, or acts on a model that stands for a
 * firewall that cannot run here (a backend's model of it): no network of this machine.
 */
export type CommandClass = 'read' | 'change' | 'offline';

/** Classifies the command lines of one tool (a backend's); undefined for other tools. */
export type CommandClassifier = (
  argv: readonly string[],
  input?: string,
) => CommandClass | undefined;

/** The environment variable listing the programs that are models of a tool (see below). */
export const MODEL_PROGRAMS_ENV = 'EGRESSGUARD_ROOTNS_GUARD_MODELS';

/**
 * A classifier that counts the programs given (absolute paths, or relative to the working
 * directory) as `offline`: models of a tool that cannot run here, standing in for it in a test,
 * which change no firewall of this machine. Nothing in the product names one; a test setup
 * injects its models' paths, in-process or through `EGRESSGUARD_ROOTNS_GUARD_MODELS`.
 */
export function classifyModelPrograms(programs: readonly string[]): CommandClassifier {
  const models = new Set(programs.map((p) => resolve(p)));
  return (argv) => (models.has(resolve(argv[0] ?? '')) ? 'offline' : undefined);
}

/** The model programs `EGRESSGUARD_ROOTNS_GUARD_MODELS` lists, separated as PATH is. */
export function modelProgramsFromEnv(value: string | undefined): string[] {
  return (value ?? '').split(delimiter).filter((p) => p !== '');
}

/**
 * What a command line does. The classifiers given (the backends' own tools) go first; anything
 * no one recognises counts as a change, so the root-namespace guard fails closed on commands it
 * does not know. `input` is what the command reads on stdin: `ip -batch -` is a read when every
 * command it is given is one.
 */
export function classifyCommand(
  argv: readonly string[],
  input?: string,
  classifiers: readonly CommandClassifier[] = [],
): CommandClass {
  for (const classify of classifiers) {
    const found = classify(argv, input);
    if (found !== undefined) return found;
  }
  return isReadOnlyCommand(argv, input) ? 'read' : 'change';
}

function isReadOnlyCommand(argv: readonly string[], input?: string): boolean {
  const [cmd, ...args] = argv;
  const name = cmd?.split('/').pop();
  switch (name) {
    case 'ip':
      return isReadOnlyIpBatch(args, input) ?? isReadOnlyIp(args);
    case 'tc':
      return isReadOnlyTc(args);
    case 'sysctl':
      return !args.some(
        (a) => ['-w', '--write', '-p', '--load', '--system', '-f'].includes(a) || a.includes('='),
      );
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
    case 'netstat':
      return true;
    case 'ifconfig':
      // A listing: flags only (-a, -l, -u, -d, -L), or one interface name and nothing else.
      return (
        args.every((a) => /^-[aludLvm]+$/.test(a)) ||
        (args.length === 1 && !args[0]?.startsWith('-'))
      );
    case 'route':
      // BSD route(8): `get` and `monitor` read; add, delete, change, flush write.
      return ['get', 'monitor', 'show'].includes(args.find((a) => !a.startsWith('-')) ?? '');
    default:
      return false;
  }
}

/** Words that are not options nor option values (`-n NAME`, `-f inet`, `-f FILE`, …). */
export function commandOperands(args: readonly string[], withValue: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i] ?? '';
    if (a.startsWith('-')) {
      if (withValue.has(a)) i++;
      continue;
    }
    out.push(a);
  }
  return out;
}

const IP_READ_VERBS = new Set(['show', 'list', 'ls', 'lst', 'get']);
const IP_VALUE_OPTIONS = new Set([
  '-n',
  '-netns',
  '-f',
  '-family',
  '-rc',
  '-rcvbuf',
  '-l',
  '-loops',
]);

/**
 * ip's options as ip reads them: `--x` is `-x`, and any prefix selects the first option it
 * starts (in ip's order, -batch before -brief and -family before -force): `-b` is a batch.
 */
function ipOption(arg: string): 'batch' | 'force' | undefined {
  const opt = arg.startsWith('--') ? arg.slice(1) : arg;
  if (opt.length >= 2 && '-batch'.startsWith(opt)) return 'batch';
  if (opt.length >= 3 && '-force'.startsWith(opt)) return 'force';
  return undefined;
}

/**
 * `ip [options] -batch -` with its commands on stdin: each line is classified as
 * `ip [options] LINE`. Undefined when this is not such a batch. Fails closed on anything but
 * plain words (ip joins lines ending in "\\", cuts at "#" and reads quotes) and on -force.
 */
function isReadOnlyIpBatch(
  args: readonly string[],
  input: string | undefined,
): boolean | undefined {
  const at = args.findIndex((a) => ipOption(a) === 'batch');
  if (at === -1) return undefined;
  if (args[at + 1] !== '-' || input === undefined || args.some((a) => ipOption(a) === 'force')) {
    return false;
  }
  if (!/^[A-Za-z0-9 ._:/\n-]*$/.test(input)) return false;
  const options = args.filter((_, i) => i !== at && i !== at + 1);
  if (commandOperands(options, IP_VALUE_OPTIONS).length > 0) return false; // a command beside the batch
  const lines = input
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');
  return lines.length > 0 && lines.every((l) => isReadOnlyIp([...options, ...l.split(/\s+/)]));
}

function isReadOnlyIp(args: readonly string[]): boolean {
  // A batch file or -force can hold any change.
  if (args.some((a) => ipOption(a) !== undefined)) return false;
  const words = commandOperands(args, IP_VALUE_OPTIONS);
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
