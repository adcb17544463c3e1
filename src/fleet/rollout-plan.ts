import { z } from 'zod';

/** How a push is rolled out: a canary wave, then waves of at most `maxUnavailable` hosts. */
export const rolloutParamsSchema = z.strictObject({
  /** Hosts in the first wave; 0 skips the canary. */
  canary: z.number().int().min(0).default(1),
  /** Hosts changed at once in every later wave; default: a tenth of the fleet, at least one. */
  maxUnavailable: z.number().int().positive().optional(),
  /** How long every host of a wave must stay converged before the wave succeeds. */
  bakeMs: z.number().int().min(0).default(60_000),
  /** Failing hosts a wave tolerates; one more pauses the rollout. */
  maxFailures: z.number().int().min(0).default(0),
});
export type RolloutParamsInput = z.input<typeof rolloutParamsSchema>;
export interface RolloutParams {
  readonly canary: number;
  readonly maxUnavailable: number;
  readonly bakeMs: number;
  readonly maxFailures: number;
}

/** Fixes the wave size for a fleet of `hostCount` hosts. */
export function resolveRolloutParams(input: RolloutParamsInput, hostCount: number): RolloutParams {
  const parsed = rolloutParamsSchema.parse(input);
  return {
    canary: parsed.canary,
    maxUnavailable: parsed.maxUnavailable ?? Math.max(1, Math.ceil(hostCount / 10)),
    bakeMs: parsed.bakeMs,
    maxFailures: parsed.maxFailures,
  };
}

/** Splits hosts (in a stable order) into waves: canary first, then chunks of maxUnavailable. */
export function planWaves(hostIds: readonly string[], params: RolloutParams): string[][] {
  const waves: string[][] = [];
  const canary = hostIds.slice(0, params.canary);
  if (canary.length > 0) waves.push(canary);
  for (let i = canary.length; i < hostIds.length; i += params.maxUnavailable) {
    waves.push(hostIds.slice(i, i + params.maxUnavailable));
  }
  return waves;
}

export type HostVerdict = 'baked' | 'converging' | 'failed' | 'excluded';

/** What a wave needs to know about one of its hosts. */
export interface WaveHost {
  readonly desiredHash: string | null;
  readonly desiredError: boolean;
  readonly appliedHash: string | null;
  readonly liveHash: string | null;
  readonly failureHash: string | null;
  readonly invalidHash: string | null;
  readonly convergedSince: number | null;
  readonly suspended: boolean;
  readonly decommissioned: boolean;
  readonly silent: boolean;
}

/** Judges one host of a wave: baked (converged for the bake time), failing, or still converging. */
export function judgeHost(host: WaveHost, now: number, bakeMs: number): HostVerdict {
  if (host.decommissioned || host.suspended) return 'excluded';
  if (host.desiredError) return 'failed';
  if (host.desiredHash === null) return 'converging';
  if (host.invalidHash === host.desiredHash) return 'failed';
  if (host.silent) return 'failed';
  const converged = host.appliedHash === host.desiredHash && host.liveHash === host.desiredHash;
  if (!converged && host.failureHash === host.desiredHash) return 'failed';
  if (converged && host.convergedSince !== null && now - host.convergedSince >= bakeMs) {
    return 'baked';
  }
  return 'converging';
}

export type WaveVerdict = 'succeeded' | 'paused' | 'waiting';

/** A wave succeeds when every host it counts is baked; it pauses when too many fail. */
export function judgeWave(
  verdicts: readonly HostVerdict[],
  maxFailures: number,
): { verdict: WaveVerdict; failed: number; baked: number; counted: number } {
  const failed = verdicts.filter((v) => v === 'failed').length;
  const baked = verdicts.filter((v) => v === 'baked').length;
  const counted = verdicts.filter((v) => v !== 'excluded').length;
  if (failed > maxFailures) return { verdict: 'paused', failed, baked, counted };
  // Tolerated failures (at most maxFailures) do not block the wave once the others baked.
  if (baked + failed === counted) return { verdict: 'succeeded', failed, baked, counted };
  return { verdict: 'waiting', failed, baked, counted };
}
