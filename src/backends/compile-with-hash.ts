import { BLANK_STAMP, hostConfigHash, type HostIR } from '../ir/index.js';
import type { Artifact, ArtifactRole, Backend, BackendOptions } from './backend.js';

/**
 * Compiles once with the blank stamp, hashes that, then compiles again with the hash as the
 * stamp: the hash covers every artifact with the stamp itself blanked, so it is what a recompile
 * would give. Compiling again (not replacing the text) lets a backend carry the stamp in its own
 * shape (pf splits it over two labels, each at most 63 bytes).
 */
export function compileWithHash(
  backend: Pick<Backend, 'createCompiler'>,
  input: {
    readonly ir: HostIR;
    readonly options?: BackendOptions;
    readonly versions: { readonly compiler: string; readonly agent: string };
  },
): { artifacts: Artifact[]; hash: string } {
  const blank = backend.createCompiler().compile(input.ir, {
    options: input.options ?? {},
    stamp: BLANK_STAMP,
  });
  const hash = hostConfigHash({ ir: input.ir, artifacts: blank, versions: input.versions });
  const stamp = `eg-hash:${hash}`;
  const artifacts = backend.createCompiler().compile(input.ir, {
    options: input.options ?? {},
    stamp,
  });
  return { artifacts: [...artifacts], hash };
}

/** The artifact a backend declares for a role (the lockdown, say), if it compiled one. */
export function artifactOfRole(
  backend: Pick<Backend, 'artifactRoles'>,
  artifacts: readonly Artifact[],
  role: ArtifactRole,
): Artifact | undefined {
  return artifacts.find((a) => backend.artifactRoles[a.name] === role);
}
