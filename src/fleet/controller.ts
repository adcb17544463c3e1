import type {
  AuditEntry,
  BundleResponse,
  EnrollRequest,
  EnrollResponse,
  EventView,
  HostView,
  ParsedStatusReport,
  PushResult,
  RollbackResponse,
  RolloutView,
  TokenResponse,
} from './protocol.js';
import type { RolloutParamsInput } from './rollout-plan.js';
import type { Store } from './store/open-store.js';
import { AgentIngest, type ReportTaken } from './controller/agent-ingest.js';
import { ControllerCore, type ControllerOptions } from './controller/controller-core.js';
import * as enrollment from './controller/enrollment.js';
import type { HostIdentity } from './controller/enrollment.js';
import * as verbs from './controller/operator-verbs.js';
import * as views from './controller/views.js';
import * as rollouts from './controller/rollouts.js';

export type { ReportTaken } from './controller/agent-ingest.js';
export type { ControllerOptions } from './controller/controller-core.js';
export type { HostIdentity } from './controller/enrollment.js';

/**
 * The fleet's control logic over one store. Every replica runs one; they share nothing but the
 * database: rollout steps run under a row lock and record their transitions under a unique key, so
 * two replicas never start a wave twice.
 *
 * Each role lives in its own module under `controller/`: enrollment and credentials, the agents'
 * long polls and reports, operator verbs on hosts, rollouts and their waves, and the views.
 */
export class Controller {
  readonly #core: ControllerCore;
  readonly #ingest: AgentIngest;

  constructor(options: ControllerOptions) {
    this.#core = new ControllerCore(options);
    this.#ingest = new AgentIngest(this.#core);
  }

  /** How long an agent's long poll waits, and so how often a healthy agent checks in. */
  get pollIntervalMs(): number {
    return this.#core.pollIntervalMs;
  }

  /** A host is silent when it has not checked in for this long. */
  get graceMs(): number {
    return this.#core.graceMs;
  }

  /** How long after this replica started a host seen before the start has before it is silent. */
  get restartGraceMs(): number {
    return this.#core.restartGraceMs;
  }

  get store(): Store {
    return this.#core.store;
  }

  /** When this replica started, on the database's clock. */
  get startedAt(): number {
    return this.#core.startedAt;
  }

  /** Samples the database's clock again (every tick does; the server once before it listens). */
  syncClock(): Promise<void> {
    return this.#core.clock.sync();
  }

  // ── enrollment and credentials ────────────────────────────────────────────────────────────

  /** Mints a bootstrap token that enrolls up to `uses` hosts before it expires. */
  createBootstrapToken(
    options: enrollment.BootstrapTokenOrder,
    actor: string,
  ): Promise<TokenResponse> {
    return enrollment.createBootstrapToken(this.#core, options, actor);
  }

  /** Exchanges a bootstrap token for the host's own credential (shown once, stored hashed). */
  enroll(request: EnrollRequest): Promise<EnrollResponse> {
    return enrollment.enroll(this.#core, request);
  }

  /** The host a credential belongs to, or a refusal (unknown, revoked, decommissioned). */
  authenticateHost(presented: string): Promise<HostIdentity> {
    return enrollment.authenticateHost(this.#core, presented);
  }

  /**
   * Issues a new credential; the one presented stays valid until the new one is first used. At
   * most those two are ever valid.
   */
  rotateCredential(identity: HostIdentity): Promise<string> {
    return enrollment.rotateCredential(this.#core, identity);
  }

  /** Revokes every credential of a host: its agent is refused until it enrolls again. */
  revokeCredentials(hostName: string, actor: string): Promise<{ revoked: number }> {
    return enrollment.revokeCredentials(this.#core, hostName, actor);
  }

  // ── the agent's side: bundle and status ──────────────────────────────────────────────────

  /** What the host should run now; the long poll compares it with what the agent knows. */
  bundleFor(hostId: string): Promise<BundleResponse & { decommissioned: boolean }> {
    return this.#ingest.bundleFor(hostId);
  }

  /** Records that the host's agent is alive (written in batches by `flushCheckins`). */
  checkIn(hostId: string): Promise<void> {
    return this.#ingest.checkIn(hostId);
  }

  /** Writes the check-ins held in memory; a newer time already stored (a status report) stays. */
  flushCheckins(): Promise<void> {
    return this.#ingest.flushCheckins();
  }

  /** Takes an agent's report: hashes, the last attempt, drift, facts; re-derives conditions. */
  reportStatus(hostId: string, report: ParsedStatusReport): Promise<ReportTaken> {
    return this.#ingest.reportStatus(hostId, report);
  }

  // ── operators ─────────────────────────────────────────────────────────────────────────────

  /** Validates a policy and starts rolling it out in waves; supersedes any unfinished rollout. */
  push(
    input: rollouts.PushOrder,
    actor: string,
    kind: 'push' | 'rollback' = 'push',
  ): Promise<PushResult> {
    return rollouts.push(this.#core, input, actor, kind);
  }

  /** Rolls the fleet back to the policy pushed before the current one, in one wave. */
  rollback(actor: string, rollout: RolloutParamsInput = {}): Promise<RollbackResponse> {
    return rollouts.rollback(this.#core, actor, rollout);
  }

  /** Re-arms the host's failure budget: its agent tries again now. */
  retry(hostName: string, actor: string): Promise<HostView> {
    return verbs.retry(this.#core, hostName, actor);
  }

  /** Makes the host's agent apply its bundle again, even when the live hash matches. */
  force(hostName: string, actor: string): Promise<HostView> {
    return verbs.force(this.#core, hostName, actor);
  }

  /** The agent keeps enforcing what it has and takes no new bundle until resumed. */
  suspend(hostName: string, actor: string): Promise<HostView> {
    return verbs.suspend(this.#core, hostName, actor);
  }

  resume(hostName: string, actor: string): Promise<HostView> {
    return verbs.resume(this.#core, hostName, actor);
  }

  /** Retires a host: its credentials are revoked and its agent told to stop; history is kept. */
  decommission(hostName: string, actor: string): Promise<HostView> {
    return verbs.decommission(this.#core, hostName, actor);
  }

  /** Continues a paused rollout: the paused wave is accepted as judged and the next one starts. */
  resumeRollout(rolloutId: string | undefined, actor: string): Promise<RolloutView> {
    return rollouts.resumeRollout(this.#core, rolloutId, actor);
  }

  // ── rollouts ──────────────────────────────────────────────────────────────────────────────

  /** Advances every progressing rollout one judgement: the ticker of each replica calls this. */
  async tick(): Promise<void> {
    await this.syncClock();
    await this.flushCheckins();
    await rollouts.advanceProgressingRollouts(this.#core);
  }

  /**
   * Starts the current wave, or judges it: pause, or succeed and start the next. Runs under the
   * rollout's row lock (PostgreSQL skips a rollout another replica is judging).
   */
  advanceRollout(rolloutId: string): Promise<void> {
    return rollouts.advanceRollout(this.#core, rolloutId);
  }

  // ── views ─────────────────────────────────────────────────────────────────────────────────

  async listHosts(options: { includeDecommissioned?: boolean } = {}): Promise<HostView[]> {
    await this.#flushBeforeRead();
    return views.listHosts(this.#core, options);
  }

  async host(hostName: string): Promise<HostView> {
    await this.#flushBeforeRead();
    return views.hostView(this.#core, hostName);
  }

  listRollouts(limit = 20): Promise<RolloutView[]> {
    return views.listRollouts(this.#core, limit);
  }

  rolloutView(rolloutId: string): Promise<RolloutView> {
    return views.rolloutView(this.#core, rolloutId);
  }

  events(filter: { hostName?: string; rolloutId?: string; limit?: number }): Promise<EventView[]> {
    return views.listEvents(this.#core, filter);
  }

  auditLog(limit = 100): Promise<AuditEntry[]> {
    return views.listAudit(this.#core, limit);
  }

  /** Keeps the newest `eventsPerHost` events of each host. */
  pruneEvents(): Promise<void> {
    return views.pruneEvents(this.#core);
  }

  /**
   * Writes the check-ins held in memory so a view shows them; a store that cannot write (its disk
   * full) still serves the view, a little behind (they stay held for the next flush).
   */
  async #flushBeforeRead(): Promise<void> {
    try {
      await this.flushCheckins();
    } catch (error) {
      if (this.#core.store.noteFailure(error)?.state !== 'disk-full') throw error;
    }
  }
}
