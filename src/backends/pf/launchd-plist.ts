import { SaxesParser } from 'saxes';
import { escapeXml } from '../../core/index.js';
import { calendarIntervalNotBefore, type CalendarInterval } from './calendar-interval.js';

/**
 * LaunchDaemon property lists (launchd.plist(5)): the resident re-converge daemon (re-arms pf at
 * boot and every minute after a flush, a reboot or a renumbered interface) and the one-shot
 * confirm-or-revert timer (fires once after the confirm window unless egressguard removes it on
 * `confirm`). Rendered by hand — a plist is a few elements — and checked by `lintLaunchdPlist`
 * with a real XML parser, with the rules `plutil -lint` applies plus launchd's key types.
 */

export interface LaunchDaemon {
  readonly label: string;
  readonly programArguments: readonly string[];
  readonly runAtLoad?: boolean;
  readonly startInterval?: number;
  readonly startCalendarInterval?: readonly CalendarInterval[];
  readonly launchOnlyOnce?: boolean;
  readonly keepAlive?: boolean;
  readonly standardOutPath?: string;
  readonly standardErrorPath?: string;
  readonly environmentVariables?: Readonly<Record<string, string>>;
  readonly processType?: 'Background' | 'Standard' | 'Adaptive' | 'Interactive';
}

/** Re-arms at boot (RunAtLoad) and re-converges every `intervalSeconds` (StartInterval). */
export function createReconvergeDaemon(options: {
  label: string;
  programArguments: readonly string[];
  intervalSeconds?: number;
  logPath?: string;
}): LaunchDaemon {
  return {
    label: options.label,
    programArguments: options.programArguments,
    runAtLoad: true,
    startInterval: options.intervalSeconds ?? 60,
    processType: 'Background',
    ...(options.logPath === undefined
      ? {}
      : { standardOutPath: options.logPath, standardErrorPath: options.logPath }),
  };
}

/**
 * The out-of-process confirm timer: runs once (LaunchOnlyOnce), at whichever comes first of
 * `delaySeconds` after it is loaded (StartInterval with RunAtLoad false) and the first local
 * minute at or after `deadline` (StartCalendarInterval, in `timeZone`, launchd's). Both, because
 * launchd.plist(5) (macOS 10.10 on) says of StartInterval "If the system is asleep during the
 * time of the next scheduled interval firing, that interval will be missed due to shortcomings in
 * kqueue(3)", and of StartCalendarInterval "Unlike cron which skips job invocations when the
 * computer is asleep, launchd will start the job the next time the computer wakes up": a Mac
 * asleep at the deadline reverts when it wakes, not never. `confirm` boots it out and deletes it.
 */
export function createConfirmRevertDaemon(options: {
  label: string;
  programArguments: readonly string[];
  delaySeconds: number;
  /** When the revert is due (epoch ms), and when it was scheduled. */
  deadline: number;
  scheduledAt: number;
  timeZone: string;
}): LaunchDaemon {
  return {
    label: options.label,
    programArguments: options.programArguments,
    runAtLoad: false,
    startInterval: options.delaySeconds,
    startCalendarInterval: [
      calendarIntervalNotBefore(options.deadline, {
        from: options.scheduledAt,
        timeZone: options.timeZone,
      }),
    ],
    launchOnlyOnce: true,
    processType: 'Background',
  };
}

/** launchd.plist(5)'s StartCalendarInterval keys, with their ranges. */
const CALENDAR_KEYS = {
  Month: ['month', 1, 12],
  Day: ['day', 1, 31],
  Weekday: ['weekday', 0, 7],
  Hour: ['hour', 0, 23],
  Minute: ['minute', 0, 59],
} as const;

export function renderLaunchDaemonPlist(daemon: LaunchDaemon): string {
  const entries: string[] = [];
  const add = (key: string, value: string): void => {
    entries.push(`\t<key>${escapeXml(key)}</key>`, value);
  };
  add('Label', `\t<string>${escapeXml(daemon.label)}</string>`);
  add(
    'ProgramArguments',
    [
      '\t<array>',
      ...daemon.programArguments.map((a) => `\t\t<string>${escapeXml(a)}</string>`),
      '\t</array>',
    ].join('\n'),
  );
  if (daemon.runAtLoad !== undefined) add('RunAtLoad', `\t<${daemon.runAtLoad}/>`);
  if (daemon.startInterval !== undefined) {
    if (!Number.isInteger(daemon.startInterval) || daemon.startInterval < 1) {
      throw new RangeError(`StartInterval must be a positive integer, not ${daemon.startInterval}`);
    }
    add('StartInterval', `\t<integer>${daemon.startInterval}</integer>`);
  }
  if (daemon.startCalendarInterval !== undefined) {
    add(
      'StartCalendarInterval',
      [
        '\t<array>',
        ...daemon.startCalendarInterval.flatMap((entry) => [
          '\t\t<dict>',
          ...Object.entries(CALENDAR_KEYS).flatMap(([key, [field, low, high]]) => {
            const value = entry[field];
            if (value === undefined) return [];
            if (!Number.isInteger(value) || value < low || value > high) {
              throw new RangeError(
                `StartCalendarInterval ${key} must be ${low}–${high}, not ${value}`,
              );
            }
            return [`\t\t\t<key>${key}</key>`, `\t\t\t<integer>${value}</integer>`];
          }),
          '\t\t</dict>',
        ]),
        '\t</array>',
      ].join('\n'),
    );
  }
  if (daemon.launchOnlyOnce !== undefined) add('LaunchOnlyOnce', `\t<${daemon.launchOnlyOnce}/>`);
  if (daemon.keepAlive !== undefined) add('KeepAlive', `\t<${daemon.keepAlive}/>`);
  if (daemon.processType !== undefined)
    add('ProcessType', `\t<string>${daemon.processType}</string>`);
  if (daemon.standardOutPath !== undefined)
    add('StandardOutPath', `\t<string>${escapeXml(daemon.standardOutPath)}</string>`);
  if (daemon.standardErrorPath !== undefined)
    add('StandardErrorPath', `\t<string>${escapeXml(daemon.standardErrorPath)}</string>`);
  if (daemon.environmentVariables !== undefined) {
    const pairs = Object.entries(daemon.environmentVariables).sort(([a], [b]) =>
      a < b ? -1 : a > b ? 1 : 0,
    );
    add(
      'EnvironmentVariables',
      [
        '\t<dict>',
        ...pairs.flatMap(([k, v]) => [
          `\t\t<key>${escapeXml(k)}</key>`,
          `\t\t<string>${escapeXml(v)}</string>`,
        ]),
        '\t</dict>',
      ].join('\n'),
    );
  }
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    '<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">',
    '<plist version="1.0">',
    '<dict>',
    ...entries,
    '</dict>',
    '</plist>',
    '',
  ].join('\n');
}

interface XmlElement {
  readonly name: string;
  readonly attributes: Readonly<Record<string, string>>;
  readonly children: XmlElement[];
  text: string;
  readonly line: number;
}

type PlistValue =
  | { kind: 'string' | 'integer' | 'real' | 'date' | 'data'; text: string }
  | { kind: 'bool'; value: boolean }
  | { kind: 'array'; items: PlistValue[] }
  | { kind: 'dict'; entries: Map<string, PlistValue> };

/** launchd.plist(5) keys egressguard may write, with their types. */
const LAUNCHD_KEYS: Readonly<
  Record<string, PlistValue['kind'] | 'string-array' | 'string-dict' | 'calendar'>
> = {
  Label: 'string',
  Program: 'string',
  ProgramArguments: 'string-array',
  RunAtLoad: 'bool',
  StartInterval: 'integer',
  StartCalendarInterval: 'calendar',
  LaunchOnlyOnce: 'bool',
  KeepAlive: 'bool',
  StandardOutPath: 'string',
  StandardErrorPath: 'string',
  EnvironmentVariables: 'string-dict',
  ProcessType: 'string',
  ThrottleInterval: 'integer',
  WorkingDirectory: 'string',
  UserName: 'string',
  AbandonProcessGroup: 'bool',
};

/**
 * Checks a LaunchDaemon plist the way `plutil -lint` does (well-formed XML, one `plist` root of
 * version 1.0 holding one value, dict keys followed by values, integers that parse, booleans as
 * `<true/>`/`<false/>`), then launchd's rules: a dict with a string Label, ProgramArguments an
 * array of strings (or Program), each known key of its type, StartInterval positive. Returns
 * problems, empty when the plist is valid.
 */
export function lintLaunchdPlist(xml: string): string[] {
  const problems: string[] = [];
  const root = parseXml(xml, problems);
  if (root === null) return problems;
  if (root.name !== 'plist') return [...problems, `root element is <${root.name}>, not <plist>`];
  if (root.attributes['version'] !== undefined && root.attributes['version'] !== '1.0') {
    problems.push(`plist version is "${root.attributes['version']}", not "1.0"`);
  }
  if (root.children.length !== 1) {
    return [...problems, `<plist> holds ${root.children.length} values, not 1`];
  }
  const value = readValue(root.children[0] as XmlElement, problems);
  if (value === null) return problems;
  if (value.kind !== 'dict') return [...problems, `the top-level value is ${value.kind}, not dict`];
  const label = value.entries.get('Label');
  if (label?.kind !== 'string' || label.text === '')
    problems.push('Label is missing or not a string');
  if (!value.entries.has('ProgramArguments') && !value.entries.has('Program')) {
    problems.push('neither ProgramArguments nor Program is set');
  }
  for (const [key, entry] of value.entries) {
    const expected = LAUNCHD_KEYS[key];
    if (expected === undefined) {
      problems.push(`unknown launchd key "${key}"`);
      continue;
    }
    if (expected === 'string-array') {
      if (
        entry.kind !== 'array' ||
        entry.items.length === 0 ||
        entry.items.some((i) => i.kind !== 'string')
      ) {
        problems.push(`${key} must be a non-empty array of strings`);
      }
    } else if (expected === 'calendar') {
      problems.push(...lintCalendarInterval(entry));
    } else if (expected === 'string-dict') {
      if (entry.kind !== 'dict' || [...entry.entries.values()].some((v) => v.kind !== 'string')) {
        problems.push(`${key} must be a dict of strings`);
      }
    } else if (entry.kind !== expected) {
      const article = { bool: 'a boolean', integer: 'an integer' }[expected as string];
      problems.push(`${key} must be ${article ?? `a ${expected}`}, not ${entry.kind}`);
    }
  }
  const interval = value.entries.get('StartInterval');
  if (interval?.kind === 'integer' && Number(interval.text) < 1) {
    problems.push('StartInterval must be a positive number of seconds');
  }
  return problems;
}

/** StartCalendarInterval: a dict of integers, or an array of them (launchd.plist(5)). */
function lintCalendarInterval(entry: PlistValue): string[] {
  const dicts = entry.kind === 'array' ? entry.items : [entry];
  if (dicts.length === 0 || dicts.some((d) => d.kind !== 'dict')) {
    return ['StartCalendarInterval must be a dict of integers or an array of them'];
  }
  const problems: string[] = [];
  for (const dict of dicts) {
    if (dict.kind !== 'dict') continue;
    for (const [key, value] of dict.entries) {
      const range = CALENDAR_KEYS[key as keyof typeof CALENDAR_KEYS] as
        (typeof CALENDAR_KEYS)[keyof typeof CALENDAR_KEYS] | undefined;
      if (range === undefined) {
        problems.push(`unknown StartCalendarInterval key "${key}"`);
      } else if (
        value.kind !== 'integer' ||
        Number(value.text) < range[1] ||
        Number(value.text) > range[2]
      ) {
        problems.push(`StartCalendarInterval ${key} must be an integer ${range[1]}–${range[2]}`);
      }
    }
  }
  return problems;
}

/**
 * Reads back what launchd takes of a plist egressguard writes (the launchctl model reads it at
 * bootstrap, as launchd does): the label, the arguments and the timing keys. Throws with the
 * lint's problems when the plist is not valid.
 */
export function readLaunchDaemonPlist(xml: string): LaunchDaemon {
  const problems = lintLaunchdPlist(xml);
  const root = problems.length === 0 ? parseXml(xml, problems) : null;
  const value = root?.children[0] === undefined ? null : readValue(root.children[0], problems);
  if (value?.kind !== 'dict' || problems.length > 0) {
    throw new Error(`not a valid LaunchDaemon plist: ${problems.join('; ') || 'no dict'}`);
  }
  const text = (key: string): string | undefined => {
    const entry = value.entries.get(key);
    return entry !== undefined && 'text' in entry ? entry.text.trim() : undefined;
  };
  const flag = (key: string): boolean | undefined => {
    const entry = value.entries.get(key);
    return entry?.kind === 'bool' ? entry.value : undefined;
  };
  const args = value.entries.get('ProgramArguments');
  const interval = text('StartInterval');
  const runAtLoad = flag('RunAtLoad');
  const launchOnlyOnce = flag('LaunchOnlyOnce');
  const calendar = value.entries.get('StartCalendarInterval');
  const startCalendarInterval = calendar === undefined ? undefined : readCalendarInterval(calendar);
  return {
    label: text('Label') ?? '',
    programArguments:
      args?.kind === 'array' ? args.items.map((i) => ('text' in i ? i.text : '')) : [],
    ...(runAtLoad === undefined ? {} : { runAtLoad }),
    ...(interval === undefined ? {} : { startInterval: Number(interval) }),
    ...(startCalendarInterval === undefined ? {} : { startCalendarInterval }),
    ...(launchOnlyOnce === undefined ? {} : { launchOnlyOnce }),
  };
}

function readCalendarInterval(entry: PlistValue): CalendarInterval[] {
  const dicts = entry.kind === 'array' ? entry.items : [entry];
  return dicts.map((dict) => {
    const out: Record<string, number> = {};
    if (dict.kind !== 'dict') return out;
    for (const [key, value] of dict.entries) {
      const range = CALENDAR_KEYS[key as keyof typeof CALENDAR_KEYS] as
        (typeof CALENDAR_KEYS)[keyof typeof CALENDAR_KEYS] | undefined;
      if (range !== undefined && 'text' in value) out[range[0]] = Number(value.text);
    }
    return out;
  });
}

function parseXml(xml: string, problems: string[]): XmlElement | null {
  const parser = new SaxesParser({ xmlns: false, position: true });
  const stack: XmlElement[] = [];
  let root: XmlElement | null = null;
  parser.on('error', (error) => {
    problems.push(`not well-formed XML: ${error.message}`);
  });
  parser.on('opentag', (tag) => {
    const attributes: Record<string, string> = {};
    for (const [name, value] of Object.entries(tag.attributes)) attributes[name] = value;
    const element: XmlElement = {
      name: tag.name,
      attributes,
      children: [],
      text: '',
      line: parser.line,
    };
    const parent = stack[stack.length - 1];
    if (parent === undefined) root = element;
    else parent.children.push(element);
    stack.push(element);
  });
  parser.on('text', (text) => {
    const current = stack[stack.length - 1];
    if (current !== undefined) current.text += text;
  });
  parser.on('closetag', () => {
    stack.pop();
  });
  try {
    parser.write(xml).close();
  } catch (error) {
    problems.push(`not well-formed XML: ${(error as Error).message}`);
  }
  return problems.length > 0 ? null : root;
}

function readValue(element: XmlElement, problems: string[]): PlistValue | null {
  const where = `line ${element.line}`;
  switch (element.name) {
    case 'string':
    case 'date':
    case 'data':
    case 'real':
    case 'integer': {
      if (element.children.length > 0) {
        problems.push(`<${element.name}> holds elements (${where})`);
        return null;
      }
      const text = element.text;
      if (element.name === 'integer' && !/^\s*[+-]?(\d+|0x[0-9a-fA-F]+)\s*$/.test(text)) {
        problems.push(`<integer> "${text}" is not an integer (${where})`);
        return null;
      }
      if (element.name === 'real' && !Number.isFinite(Number(text.trim()))) {
        problems.push(`<real> "${text}" is not a number (${where})`);
        return null;
      }
      if (element.name === 'date' && !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/.test(text.trim())) {
        problems.push(`<date> "${text}" is not an ISO 8601 UTC date (${where})`);
        return null;
      }
      return { kind: element.name, text };
    }
    case 'true':
    case 'false':
      if (element.children.length > 0 || element.text.trim() !== '') {
        problems.push(`<${element.name}/> must be empty (${where})`);
        return null;
      }
      return { kind: 'bool', value: element.name === 'true' };
    case 'array': {
      const items: PlistValue[] = [];
      for (const child of element.children) {
        const item = readValue(child, problems);
        if (item === null) return null;
        items.push(item);
      }
      return { kind: 'array', items };
    }
    case 'dict': {
      const entries = new Map<string, PlistValue>();
      const children = element.children;
      for (let i = 0; i < children.length; i += 2) {
        const key = children[i] as XmlElement;
        const value = children[i + 1];
        if (key.name !== 'key') {
          problems.push(`<dict> has <${key.name}> where a <key> belongs (line ${key.line})`);
          return null;
        }
        if (value === undefined) {
          problems.push(`<key>${key.text}</key> has no value (line ${key.line})`);
          return null;
        }
        if (entries.has(key.text)) {
          problems.push(`<key>${key.text}</key> appears twice (line ${key.line})`);
          return null;
        }
        const parsed = readValue(value, problems);
        if (parsed === null) return null;
        entries.set(key.text, parsed);
      }
      return { kind: 'dict', entries };
    }
    default:
      problems.push(`<${element.name}> is not a property list type (${where})`);
      return null;
  }
}
