import type { Runner } from '../../../src/runner/index.js';

/** The live name of one of our sets: a compiled set's name ends in a hash of its content. */
export async function liveSetName(runner: Runner, base: string): Promise<string> {
  const listing = await runner.run(['nft', '-j', '-t', 'list', 'table', 'inet', 'egressguard'], {
    effect: 'read',
  });
  const names = (JSON.parse(listing.stdout) as { nftables: { set?: { name: string } }[] }).nftables
    .flatMap((o) => (o.set === undefined ? [] : [o.set.name]))
    .filter((name) => new RegExp(`^${base}_[0-9a-f]{12}$`).test(name));
  if (names.length !== 1)
    throw new Error(`expected one live set ${base}_<hash>, found ${names.join(', ') || 'none'}`);
  return names[0] ?? '';
}
