import {
  applyGeneration,
  planGeneration,
  type ApplyInput,
  type ApplyReport,
} from '../apply/index.js';
import type { PlanResult } from '../backends/index.js';
import { hostContext, type HostTarget } from './host-target.js';
import type { Prepared } from './prepare-policy.js';

/** Applies a prepared policy to its target through the safe-apply contract (apply, run). */
export function applyPrepared(
  target: HostTarget,
  prepared: Prepared,
  extra: Pick<ApplyInput, 'force' | 'confirm' | 'lockWaitMs' | 'onLockWait'> = {},
): Promise<ApplyReport> {
  return applyGeneration({
    ...hostContext(target, prepared.backend),
    policy: prepared.policy.name,
    hash: prepared.hash,
    artifacts: prepared.artifacts,
    ...(prepared.lockdown === undefined ? {} : { lockdown: prepared.lockdown }),
    ...extra,
  });
}

/** What applying a prepared policy would change; changes nothing. */
export function planPrepared(target: HostTarget, prepared: Prepared): Promise<PlanResult> {
  return planGeneration({
    ...hostContext(target, prepared.backend),
    hash: prepared.hash,
    artifacts: prepared.artifacts,
  });
}
