import {
  applyGeneration,
  planGeneration,
  type ApplyInput,
  type ApplyReport,
} from '../apply/index.js';
import type { BoundTunnel, PlanResult } from '../backends/index.js';
import type { HostIR, PolicyIR } from '../ir/index.js';
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
    tunnels: boundTunnels(prepared.ir, prepared.independent.tunnelMatches),
    ...(prepared.lockdown === undefined ? {} : { lockdown: prepared.lockdown }),
    ...extra,
  });
}

/**
 * Each tunnel as a bind placed it, with the policy's `match` for it: the generation keeps them, so
 * a restore, a rollback or a revert can tell a utun renumbered since (apply, run, the fleet agent).
 */
export function boundTunnels(
  ir: Pick<HostIR, 'tunnels'>,
  matches: PolicyIR['tunnelMatches'],
): BoundTunnel[] {
  return ir.tunnels.map((t) => {
    const match = matches[t.declared];
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
