import { createHash, type Hash } from 'node:crypto';
import { AddressSet } from '../core/index.js';
import type { HostIR, PolicyIR } from './nodes.js';

/** The placeholder artifacts carry where the hash will be stamped; blanked before hashing. */
export const HASH_STAMP_PATTERN = /eg-hash:[0-9a-f]{64}/g;
export const BLANK_STAMP = `eg-hash:${'0'.repeat(64)}`;

export interface HashInput {
  readonly ir: HostIR;
  /** Everything the agent writes: ruleset, route specs, units, plists. */
  readonly artifacts: readonly { readonly name: string; readonly content: string }[];
  readonly versions: { readonly compiler: string; readonly agent: string };
}

/**
 * sha256 over the canonical enforcement IR, every artifact with its stamp blanked, and the
 * versions. Requirement wording is not in the IR, so editing it re-applies nothing.
 */
export function hostConfigHash(input: HashInput): string {
  const hash = createHash('sha256');
  hash.update('egressguard/host-config/v1\n');
  writeCanonical(hash, input.ir);
  for (const artifact of [...input.artifacts].sort((a, b) => a.name.localeCompare(b.name))) {
    hash.update(`\nartifact ${artifact.name} ${artifact.content.length}\n`);
    hash.update(artifact.content.replace(HASH_STAMP_PATTERN, BLANK_STAMP));
  }
  hash.update(`\ncompiler ${input.versions.compiler}\nagent ${input.versions.agent}\n`);
  return hash.digest('hex');
}

/** A digest of the IR alone (for golden files and quick comparisons). */
export function irDigest(ir: PolicyIR | HostIR): string {
  const hash = createHash('sha256');
  writeCanonical(hash, ir);
  return hash.digest('hex');
}

/** JSON with sorted keys; address sets stream their intervals instead of being stringified. */
function writeCanonical(hash: Hash, value: unknown): void {
  if (value instanceof AddressSet) {
    hash.update(`set(${value.v4.length / 2},${value.v6.length / 2}):`);
    hash.update(new Uint8Array(Float64Array.from(value.v4).buffer));
    for (const b of value.v6) hash.update(`${b.toString(16)},`);
    return;
  }
  if (Array.isArray(value)) {
    hash.update('[');
    for (const item of value) {
      writeCanonical(hash, item);
      hash.update(',');
    }
    hash.update(']');
    return;
  }
  if (value !== null && typeof value === 'object') {
    hash.update('{');
    for (const key of Object.keys(value).sort()) {
      hash.update(`${JSON.stringify(key)}:`);
      writeCanonical(hash, (value as Record<string, unknown>)[key]);
      hash.update(',');
    }
    hash.update('}');
    return;
  }
  hash.update(value === undefined ? 'undefined' : JSON.stringify(value));
}
