import { describe, expect, it } from 'vitest';
import { classifyCommand, classifyModelPrograms } from './classify-command.js';

const isReadOnlyCommand = (argv: readonly string[], input?: string): boolean =>
  classifyCommand(argv, input) === 'read';

describe('isReadOnlyCommand', () => {
  it.each([
    [['ip', '-j', 'xfrm', 'policy', 'show']],
    [['ip', 'xfrm', 'state', 'list']],
    [['ip', 'xfrm', 'monitor']],
    [['ip', '-N', '-j', '-4', 'rule', 'show']],
    [['tc', '-j', 'qdisc', 'show']],
    [['tc', '-j', 'filter', 'show', 'dev', 'eth0', 'ingress']],
    [['/sbin/ifconfig']],
    [['ifconfig', '-a']],
    [['ifconfig', 'en0']],
    [['/usr/sbin/netstat', '-rn', '-f', 'inet']],
    [['/sbin/route', '-n', 'get', 'default']],
  ])('counts %j as a read', (argv) => {
    expect(isReadOnlyCommand(argv)).toBe(true);
  });

  it.each([
    [['ip', 'xfrm', 'policy', 'add', 'src', '10.0.0.0/8', 'dst', '0.0.0.0/0', 'dir', 'out']],
    [['ip', 'xfrm', 'state', 'flush']],
    [['tc', 'qdisc', 'add', 'dev', 'eth0', 'clsact']],
    [['tc', 'filter', 'del', 'dev', 'eth0', 'ingress']],
    [['tc', 'qdisc']],
    [['ifconfig', 'en0', 'down']],
    [['ifconfig', 'bridge100', 'addm', 'vmenet0']],
    [['route', '-n', 'add', 'default', '198.51.100.1']],
    [['route', 'flush']],
    [['route', '-n']],
  ])('counts %j as a change', (argv) => {
    expect(isReadOnlyCommand(argv)).toBe(false);
  });
});

describe('commands that change state behind a reading verb', () => {
  it.each([
    [['ip', '-batch', '/tmp/cmds']],
    [['ip', '-force', '-batch', '-']],
    [['sysctl', '-p']],
    [['sysctl', '--system']],
  ])('%j is a change', (argv) => {
    expect(isReadOnlyCommand(argv)).toBe(false);
  });

  it.each([
    [['ip', '-n', 'lab1', '-j', 'route', 'show']],
    [['ip', '-j', '-4', 'rule', 'show']],
    [['sysctl', '-n', 'net.ipv4.ip_forward']],
  ])('%j is a read', (argv) => {
    expect(isReadOnlyCommand(argv)).toBe(true);
  });
});

describe('ip -batch - with its commands on stdin', () => {
  const batch = ['ip', '-n', 'lab1', '-j', '-N', '-4', '-batch', '-'];

  it('is a read when every command is one (blank lines aside)', () => {
    expect(isReadOnlyCommand(batch, 'rule show\n\nroute show table all proto 104\n')).toBe(true);
    expect(isReadOnlyCommand(['ip', '-j', '--batch', '-'], 'rule show\n')).toBe(true);
  });

  it.each([
    ['a change among the reads', 'rule show\nroute del default\n'],
    ['nothing to run', '\n'],
    // ip joins a line ending in "\" with the next: this is `route flush table main`.
    ['a line continuation', 'route\\\n flush\\\n table\\\n main\n'],
    ['a comment that hides words', 'rule show # ok\n'],
    ['quotes', 'route show table "main"\n'],
  ])('is a change with %s', (_, input) => {
    expect(isReadOnlyCommand(batch, input)).toBe(false);
  });

  it.each([
    [['ip', '-batch', '-'], undefined],
    [['ip', '-force', '-batch', '-'], 'rule show\n'],
    [['ip', '-fo', '-b', '-'], 'rule show\n'],
    [['ip', '-batch', '/tmp/cmds'], 'rule show\n'],
    [['ip', '-ba', '/tmp/cmds'], undefined],
    [['ip', '--batch', '/tmp/cmds'], undefined],
    [['ip', 'route', 'flush', 'all', '-batch', '-'], 'rule show\n'],
  ])('%j with input %j is a change', (argv, input) => {
    expect(isReadOnlyCommand(argv, input)).toBe(false);
  });

  it('still reads -brief and -family as the options they are', () => {
    expect(isReadOnlyCommand(['ip', '-br', 'addr', 'show'])).toBe(true);
    expect(isReadOnlyCommand(['ip', '-f', 'inet', 'route', 'show'])).toBe(true);
  });
});

describe('classifyModelPrograms', () => {
  const models = classifyModelPrograms(['/repo/sim/tools/pfctl', 'relative/tool']);

  it('counts the named programs offline, by path, and knows no other program', () => {
    expect(classifyCommand(['/repo/sim/tools/pfctl', '-f', '-'], '', [models])).toBe('offline');
    expect(classifyCommand(['/repo/sim/tools/../tools/pfctl', '-E'], undefined, [models])).toBe(
      'offline',
    );
    expect(classifyCommand([`${process.cwd()}/relative/tool`], undefined, [models])).toBe(
      'offline',
    );
    expect(classifyCommand(['/sbin/pfctl', '-f', '-'], '', [models])).toBe('change');
    expect(classifyCommand(['pfctl', '-f', '-'], '', [models])).toBe('change');
    expect(classifyCommand(['/other/sim/tools/pfctl', '-E'], undefined, [models])).toBe('change');
  });
});
