import { describe, expect, it } from 'vitest';
import { classifyCommand } from '../../runner/index.js';
import { classifyNftCommand } from './nft-command.js';

// The root-namespace guard lets reads through: nft's must be told from its changes exactly.
describe('classifyNftCommand', () => {
  it.each([
    [['nft', '-j', '-t', 'list', 'ruleset']],
    [['nft', '-c', '-f', '-']],
    [['nft', '--version']],
    [['nft', 'monitor', 'trace']],
  ])('%j is a read', (argv) => {
    expect(classifyNftCommand(argv)).toBe('read');
  });

  it.each([
    [['nft', 'add', 'table', 'inet', 'x', ';', 'list', 'ruleset']],
    [['nft', 'add table inet x; list ruleset']],
    [['nft', '-f', '/etc/nftables.conf']],
    [['nft', '-f', '-']],
    [['nft', 'delete', 'table', 'inet', 'egressguard']],
    [['nft', '-i']],
  ])('%j is a change', (argv) => {
    expect(classifyNftCommand(argv)).toBe('change');
  });

  it('leaves other tools to other classifiers', () => {
    expect(classifyNftCommand(['ip', 'route', 'show'])).toBeUndefined();
  });

  it('counts nft as a change when no classifier knows it (the guard fails closed)', () => {
    expect(classifyCommand(['nft', '-j', 'list', 'ruleset'])).toBe('change');
    expect(classifyCommand(['nft', '-j', 'list', 'ruleset'], undefined, [classifyNftCommand])).toBe(
      'read',
    );
  });
});
