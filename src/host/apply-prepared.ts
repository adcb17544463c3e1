import {
  applyGeneration,
  planGeneration,
  type ApplyInput,
  type ApplyReport,
} from '../apply/index.js';
import type { BoundTunnel, PlanResult } from '../backends/index.js';
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
    tunnels: boundTunnels(prepared),
    ...(prepared.lockdown === undefined ? {} : { lockdown: prepared.lockdown }),
    ...extra,
  });
}

/** Each tunnel as this prepare bound it, with the policy's `match` for it (kept by the generation). */
function boundTunnels(prepared: Pick<Prepared, 'ir' | 'independent'>): BoundTunnel[] {
  return prepared.ir.tunnels.map((t) => {
    const match = prepared.independent.tunnelMatches[t.declared];
    return {
      declared: t.declared,
      interface: t.name,
      present: t.present,
      match: match === undefined ? null : { address: match.address, peer: match.peer },
    };
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
