import { describe, expect, it } from 'vitest';
import { isReadOnlyCommand } from './classify-command.js';

describe('isReadOnlyCommand', () => {
  it.each([
    [['ip', '-j', 'xfrm', 'policy', 'show']],
    [['ip', 'xfrm', 'state', 'list']],
    [['ip', 'xfrm', 'monitor']],
    [['ip', '-N', '-j', '-4', 'rule', 'show']],
    [['tc', '-j', 'qdisc', 'show']],
    [['tc', '-j', 'filter', 'show', 'dev', 'eth0', 'ingress']],
  ])('counts %j as a read', (argv) => {
    expect(isReadOnlyCommand(argv)).toBe(true);
  });

  it.each([
    [['ip', 'xfrm', 'policy', 'add', 'src', '10.0.0.0/8', 'dst', '0.0.0.0/0', 'dir', 'out']],
    [['ip', 'xfrm', 'state', 'flush']],
    [['tc', 'qdisc', 'add', 'dev', 'eth0', 'clsact']],
    [['tc', 'filter', 'del', 'dev', 'eth0', 'ingress']],
    [['tc', 'qdisc']],
  ])('counts %j as a change', (argv) => {
    expect(isReadOnlyCommand(argv)).toBe(false);
  });
});
