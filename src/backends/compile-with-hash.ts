import { BLANK_STAMP, hostConfigHash, type HostIR } from '../ir/index.js';
import type { Artifact, CompileOptions, Compiler } from './backend.js';

/**
 * Compiles once with the blank stamp, hashes that, then writes the hash into the stamp: the hash
 * covers every artifact with the stamp itself blanked, so it is what a recompile would give.
 */
export function compileWithHash(
  compiler: Compiler,
  input: {
    ir: HostIR;
    tableName?: string | undefined;
    steering?: CompileOptions['steering'];
    versions: { compiler: string; agent: string };
  },
): { artifacts: Artifact[]; hash: string } {
  const blank = compiler.compile(input.ir, {
    ...(input.tableName === undefined ? {} : { tableName: input.tableName }),
    ...(input.steering === undefined ? {} : { steering: input.steering }),
    stamp: BLANK_STAMP,
  });
  const hash = hostConfigHash({ ir: input.ir, artifacts: blank, versions: input.versions });
  const stamp = `eg-hash:${hash}`;
  return {
    artifacts: blank.map((a) => ({
      name: a.name,
      content: a.content.replaceAll(BLANK_STAMP, stamp),
    })),
    hash,
  };
}
