import type { Generated } from 'kysely';

/**
 * The controller's tables. Times are milliseconds since the epoch (bigint on PostgreSQL, parsed
 * back to numbers), booleans are 0/1 and structured values JSON text, so both dialects store the
 * same values and one query layer serves them.
 */
export interface Database {
  hosts: HostTable;
  credentials: CredentialTable;
  bootstrap_tokens: BootstrapTokenTable;
  pushes: PushTable;
  rollouts: RolloutTable;
  waves: WaveTable;
  events: EventTable;
  audit_log: AuditTable;
  store_probe: StoreProbeTable;
}

/** One row the store's health probe writes (migration 0003). */
export interface StoreProbeTable {
  id: number;
  at: number;
}

export interface HostTable {
  id: string;
  name: string;
  labels: string;
  facts: string | null;
  facts_digest: string | null;
  agent_version: string | null;
  enrolled_at: number;
  /** The bootstrap token that enrolled it (migration 0003): it may ask again if the answer was lost. */
  enrolled_token_id: string | null;
  last_checkin_at: number | null;
  /** The push whose policy this host should run, set when its wave starts. */
  desired_push_id: string | null;
  desired_hash: string | null;
  /** JSON `{ reason, message }` when the controller cannot bind the pushed policy to this host. */
  desired_error: string | null;
  last_attempted_hash: string | null;
  applied_hash: string | null;
  live_hash: string | null;
  /** The failure budget: which hash failed, how often, and when the agent tries again. */
  failure_hash: string | null;
  failure_count: number;
  next_attempt_at: number | null;
  last_error: string | null;
  /** What failed at `failure_hash`: `ApplyFailed` (null) or `BundleRefused` (migration 0003). */
  failure_reason: string | null;
  /** The hash the agent found can never be valid on this host (it does not compile for its facts). */
  invalid_hash: string | null;
  invalid_message: string | null;
  /** Since when applied = live = desired, for a wave's bake time. */
  converged_since: number | null;
  retry_token: number;
  force_token: number;
  suspended: number;
  decommissioned_at: number | null;
  conditions: string;
  counters: string | null;
  updated_at: number;
}

export interface CredentialTable {
  id: string;
  host_id: string;
  secret_hash: string;
  created_at: number;
  first_used_at: number | null;
  revoked_at: number | null;
  /** A rotated credential stays valid until its successor is first used. */
  replaced_by: string | null;
}

export interface BootstrapTokenTable {
  id: string;
  secret_hash: string;
  created_at: number;
  expires_at: number;
  uses_left: number;
  labels: string;
  description: string;
  revoked_at: number | null;
}

export interface PushTable {
  id: string;
  seq: Generated<number>;
  policy_text: string;
  policy_digest: string;
  source: string;
  kind: 'push' | 'rollback';
  created_at: number;
  /** The backend options pushed with the policy, JSON (migration 0002). */
  backend_options: Generated<string>;
  /** The key a client sent so that a retried push is not pushed twice (migration 0003). */
  idempotency_key: string | null;
}

export interface RolloutTable {
  id: string;
  push_id: string;
  state: RolloutState;
  params: string;
  current_wave: number;
  paused_reason: string | null;
  created_at: number;
  updated_at: number;
}

export type RolloutState = 'progressing' | 'paused' | 'succeeded' | 'superseded';
export type WaveState =
  'pending' | 'progressing' | 'succeeded' | 'paused' | 'accepted' | 'superseded';

export interface WaveTable {
  rollout_id: string;
  wave_index: number;
  host_ids: string;
  state: WaveState;
  started_at: number | null;
  judged_at: number | null;
}

export interface EventTable {
  id: Generated<number>;
  at: number;
  host_id: string | null;
  rollout_id: string | null;
  kind: string;
  message: string;
  hash: string | null;
  /** Set for transitions that must be recorded once (a wave's start and end): unique. */
  once_key: string | null;
}

export interface AuditTable {
  id: Generated<number>;
  at: number;
  actor: string;
  action: string;
  target: string;
  details: string;
}
