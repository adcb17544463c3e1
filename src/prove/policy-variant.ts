import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join, normalize } from 'node:path';
import { parseDocument } from 'yaml';
import { AddressSet, EgressguardError, formatAddress, parseAddress } from '../core/index.js';
import type { Policy } from '../policy/index.js';
import { messageOf } from './measure-phase.js';

/** Where the variant's extra sources come from: RFC 2544's benchmarking range, RFC 3849's. */
const POOL = { 4: '198.19.255.0/24', 6: '2001:db8:ffff:ffff::/120' } as const;

/**
 * A copy of the policy, with the list files it reads beside it, that differs in its name and in
 * one more source address per class and family the class has, which no class and no probe uses:
 * applying it replaces the table (a new stamp) and every class set (new content, so new sets are
 * staged and the rules switch to them), and changes nothing the probes can tell.
 */
export function writePolicyVariant(policy: Policy, file: string, dir: string): string {
  mkdirSync(dir, { recursive: true });
  const document = parseDocument(readText(file));
  const name = `${policy.name.slice(0, 27)}-alt`;
  document.setIn(
    ['metadata', 'name'],
    name === policy.name ? `${policy.name.slice(0, 27)}-alu` : name,
  );
  // Written out as prefixes: a source list may be an alias or name networks.
  for (const [className, sources] of variantSources(policy)) {
    document.setIn(['classes', className, 'sources'], sources);
  }
  const networks = document.get('networks', true) as { toJSON(): unknown } | undefined;
  const json = (networks?.toJSON() ?? {}) as Record<string, unknown>;
  for (const definition of Object.values(json)) {
    const files = (definition as { files?: unknown }).files;
    if (!Array.isArray(files)) continue;
    for (const listFile of files) {
      if (typeof listFile !== 'string' || isAbsolute(listFile)) continue;
      const target = join(dir, normalize(listFile));
      if (!target.startsWith(dir)) continue; // never outside the copy
      mkdirSync(dirname(target), { recursive: true });
      copyFileSync(join(dirname(file), listFile), target);
    }
  }
  const out = join(dir, 'policy.yaml');
  writeFileSync(out, document.toString());
  return out;
}

/**
 * Per class, its sources as prefixes plus one free address of each family it has sources in
 * (none when the pool is used up: that class's sets then stay as they are).
 */
export function variantSources(policy: Policy): Map<string, string[]> {
  const probes = policy.requirements
    .flatMap((r) => r.probes)
    .flatMap((p) => [p.from, p.to])
    .flatMap((address) => {
      const parsed = parseAddress(address);
      return parsed === undefined ? [] : [`${address}/${parsed.family === 4 ? 32 : 128}`];
    });
  const used = policy.classes.reduce(
    (all, cls) => all.union(cls.sources),
    AddressSet.parse(probes),
  );
  const pool = { 4: AddressSet.parse([POOL[4]]), 6: AddressSet.parse([POOL[6]]) };
  const out = new Map<string, string[]>();
  for (const cls of policy.classes) {
    const sources = [...cls.sources.toCidrs(4), ...cls.sources.toCidrs(6)];
    for (const family of [4, 6] as const) {
      if (!cls.sources.has(family)) continue;
      const free = pool[family].subtract(used).only(family);
      const first = free.intervals(family).next();
      if (first.done === true) continue;
      const [start] = first.value;
      const prefix = `${formatAddress(family, start)}/${family === 4 ? 32 : 128}`;
      sources.push(prefix);
      pool[family] = pool[family].subtract(AddressSet.parse([prefix]));
    }
    out.set(cls.name, sources);
  }
  return out;
}

function readText(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (error) {
    throw new EgressguardError('io', `Cannot read policy "${file}": ${messageOf(error)}`);
  }
}
