import { z } from 'zod';
import type { PolicyIssue } from '../policy/index.js';
import type { Condition } from './conditions.js';
import type { RolloutParams } from './rollout-plan.js';
import type { RolloutState, WaveState } from './store/database.js';

/**
 * The wire between agent and controller. Every body is validated with these schemas on arrival,
 * by the controller and by the agent alike.
 */

/**
 * The bundle a controller sends: the host-independent IR of the pushed policy and the push's
 * backend options, bound to the facts the host reported (by their digest). The agent binds and
 * compiles it itself, with its own compiler and its own facts, and writes only its own table or
 * anchor: a compromised controller is not root on every host.
 */
export const BUNDLE_FORMAT = 'egressguard/bundle/host-ir-v1';

/**
 * Phase A's bundle, the validated policy document: only the recording engine takes it (protocol
 * tests and benchmarks that say so, with `createPolicyDocumentBinder`); the firewall engine refuses it.
 */
export const POLICY_DOCUMENT_FORMAT = 'egressguard/bundle/policy-document-v0';

const hash = z.string().regex(/^[0-9a-f]{64}$/, 'a sha256 hex digest');
const hostName = z
  .string()
  .min(1)
  .max(253)
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/, 'letters, digits, ".", "_" and "-"');

/** Backend options a push carries (`--rule-priority`…); keys and values are short plain text. */
export const pushOptionsSchema = z
  .record(
    z.string().regex(/^[A-Za-z][A-Za-z0-9]{0,63}$/, 'an option key such as rulePriority'),
    z.string().max(256),
  )
  .refine((o) => Object.keys(o).length <= 32, 'at most 32 options');

/** The most labels a host may carry (its own and its bootstrap token's together). */
export const MAX_HOST_LABELS = 64;

/**
 * A host's labels, as a token mints them, an agent reports them and a bundle carries them: at most
 * `MAX_HOST_LABELS`, keys up to 128 characters, values up to 256.
 */
export const hostLabelsSchema = z
  .record(z.string().min(1).max(128), z.string().max(256))
  .refine((l) => Object.keys(l).length <= MAX_HOST_LABELS, `at most ${MAX_HOST_LABELS} labels`);

/**
 * The longest reconnect backoff of an agent (its delay between tries while the controller cannot
 * be reached or refuses): a restarted controller waits this long, and a poll interval, before it
 * calls a host that checked in before the restart silent.
 */
export const AGENT_RECONNECT_CAP_MS = 60_000;

/** The most counters and tunnels one status report may carry. */
export const MAX_REPORT_COUNTERS = 4096;
export const MAX_REPORT_TUNNELS = 256;

export const hostIrBundleSchema = z.strictObject({
  format: z.literal(BUNDLE_FORMAT),
  pushId: z.string().max(64),
  source: z.string().max(1024),
  /** The host-independent IR, encoded (`encodePolicyIr`); the agent validates it on decoding. */
  ir: z.unknown(),
  options: pushOptionsSchema,
  /** The digest of the binding facts (`digestBindingFacts`) the controller compiled for. */
  factsDigest: z.string().nullable(),
  /**
   * The host's labels as the controller holds them (its bootstrap token's and its own), which
   * select the classes bound on it; absent: the host's own (`bindingFactsOf`).
   */
  labels: hostLabelsSchema.optional(),
});
export type HostIrBundle = z.infer<typeof hostIrBundleSchema>;

export const policyDocumentBundleSchema = z.strictObject({
  format: z.literal(POLICY_DOCUMENT_FORMAT),
  pushId: z.string(),
  policy: z.string(),
  source: z.string(),
  factsDigest: z.string().nullable(),
});
export type PolicyDocumentBundle = z.infer<typeof policyDocumentBundleSchema>;

/** What an agent gets to apply. */
export const hostBundleSchema = z.discriminatedUnion('format', [
  hostIrBundleSchema,
  policyDocumentBundleSchema,
]);
export type HostBundle = z.infer<typeof hostBundleSchema>;

export const enrollRequestSchema = z.strictObject({
  token: z.string().min(1).max(512),
  hostname: hostName,
  agentVersion: z.string().max(64),
  facts: z.unknown(),
});
export type EnrollRequest = z.infer<typeof enrollRequestSchema>;

export const enrollResponseSchema = z.strictObject({
  hostId: z.string(),
  hostName: z.string(),
  credential: z.string(),
});
export type EnrollResponse = z.infer<typeof enrollResponseSchema>;

/** The longest wait a long poll may ask for, in seconds (a longer poll interval polls again). */
export const MAX_POLL_WAIT_SECONDS = 120;

/** The long poll's query: answer when any of these differs from the controller's view. */
export const bundleQuerySchema = z.strictObject({
  hash: z.union([hash, z.literal('')]).default(''),
  retry: z.coerce.number().int().min(0).default(0),
  force: z.coerce.number().int().min(0).default(0),
  suspended: z.enum(['0', '1']).default('0'),
  wait: z.coerce.number().int().min(0).max(MAX_POLL_WAIT_SECONDS).default(0),
});
export type BundleQuery = z.infer<typeof bundleQuerySchema>;

export const bundleResponseSchema = z.strictObject({
  hostId: z.string(),
  /** null: no policy for this host yet, or the controller cannot bind it (see `stalled`). */
  hash: hash.nullable(),
  bundle: hostBundleSchema.nullable(),
  /** Bumped by `fleet retry`: try now, whatever the failure budget says. */
  retryToken: z.number().int(),
  /** Bumped by `fleet force`: apply again even when the live hash already matches. */
  forceToken: z.number().int(),
  suspended: z.boolean(),
  pollIntervalMs: z.number().int().positive(),
});
export type BundleResponse = z.infer<typeof bundleResponseSchema>;

/**
 * `refused`: the agent could not take the bundle the controller sent (it failed the agent's
 * checks): the host is Degraded with the reason, and the agent asks again on its failure budget.
 */
const attemptOutcomeSchema = z.enum(['applied', 'failed', 'invalid', 'refused']);

export const statusReportSchema = z.strictObject({
  agentVersion: z.string().max(64),
  /** Sent when they changed since the last report: the controller binds bundles to them. */
  facts: z.unknown().optional(),
  /** The hash the agent is converging to (from its last bundle). */
  desiredHash: hash.nullable(),
  appliedHash: hash.nullable(),
  liveHash: hash.nullable(),
  /** The last attempt, when this report follows one. */
  attempt: z
    .strictObject({
      hash,
      outcome: attemptOutcomeSchema,
      /** 1 for the first attempt at this hash; never reset but by a new hash or a retry. */
      number: z.number().int().positive(),
      message: z.string().max(4096),
      durationMs: z.number().nonnegative(),
      /** When the agent tries again (failed attempts only). */
      nextAttemptInMs: z.number().int().nonnegative().optional(),
    })
    .optional(),
  /** The live state differed from the applied state (and the agent repaired it). */
  drift: z
    .strictObject({
      detectedHash: hash.nullable(),
      repaired: z.boolean(),
      message: z.string().max(4096),
      /** How many repairs this report stands for (the watchers' between polls); absent: one. */
      repairs: z.number().int().positive().max(100_000).optional(),
    })
    .optional(),
  counters: z
    .record(z.string().max(128), z.number().nonnegative())
    .refine(
      (c) => Object.keys(c).length <= MAX_REPORT_COUNTERS,
      `at most ${MAX_REPORT_COUNTERS} counters`,
    )
    .default({}),
  tunnels: z
    .array(z.strictObject({ name: z.string().max(64), up: z.boolean() }))
    .max(MAX_REPORT_TUNNELS)
    .default([]),
});
export type StatusReport = z.input<typeof statusReportSchema>;
export type ParsedStatusReport = z.output<typeof statusReportSchema>;

export const rotateResponseSchema = z.strictObject({ credential: z.string() });

/** Every 4xx and 5xx answer. */
export const errorResponseSchema = z.strictObject({
  error: z.object({
    code: z.string(),
    message: z.string(),
    issues: z.array(z.unknown()).optional(),
  }),
});

// ── the operator API ──────────────────────────────────────────────────────────────────────────

const rolloutRequestSchema = z
  .strictObject({
    canary: z.number().int().min(0).optional(),
    maxUnavailable: z.number().int().positive().optional(),
    bakeMs: z.number().int().min(0).optional(),
    maxFailures: z.number().int().min(0).optional(),
  })
  .optional();

/** `POST /v1/pushes`: a policy to validate and roll out. */
export const pushRequestSchema = z.strictObject({
  policy: z.string().min(1),
  source: z.string().min(1).max(256),
  rollout: rolloutRequestSchema,
  /** Backend options every host compiles with (`rulePriority`, `routeTable`…). */
  options: pushOptionsSchema.optional(),
  /** The client's key: the same push sent again with it is answered, never pushed twice. */
  idempotencyKey: z
    .string()
    .regex(/^[A-Za-z0-9._:-]{8,128}$/, '8 to 128 letters, digits, ".", "_", ":" or "-"')
    .optional(),
});
export type PushRequest = z.input<typeof pushRequestSchema>;

/** `POST /v1/rollback`. */
export const rollbackRequestSchema = z.strictObject({ rollout: rolloutRequestSchema }).optional();
export type RollbackRequest = z.input<typeof rollbackRequestSchema>;

/** `POST /v1/tokens`: a bootstrap token to mint. */
export const tokenRequestSchema = z.strictObject({
  ttlSeconds: z
    .number()
    .int()
    .positive()
    .max(366 * 86_400)
    .default(86_400),
  uses: z.number().int().positive().max(100_000).default(1),
  labels: hostLabelsSchema.default({}),
  description: z.string().max(256).default(''),
});
export type TokenRequest = z.input<typeof tokenRequestSchema>;

/** The verbs an operator sends to one host: `POST /v1/hosts/:name/<verb>`. */
export const HOST_VERBS = ['retry', 'force', 'suspend', 'resume', 'decommission'] as const;
export type HostVerb = (typeof HOST_VERBS)[number];

/** `GET /v1/hosts`. */
export interface HostsResponse {
  readonly hosts: readonly HostView[];
}
/** `GET /v1/hosts/:name` and every host verb. */
export interface HostResponse {
  readonly host: HostView;
}
/** `GET /v1/hosts/:name/events` and `GET /v1/events`. */
export interface EventsResponse {
  readonly events: readonly EventView[];
}
/** `POST /v1/hosts/:name/credentials/revoke`. */
export interface RevokeCredentialsResponse {
  readonly revoked: number;
}
/** `POST /v1/tokens`: the token is shown once. */
export interface TokenResponse {
  readonly token: string;
  readonly id: string;
  readonly expiresAt: number;
}
/** `POST /v1/pushes` (an invalid policy is refused with 422 and its issues). */
export type PushResponse = Extract<PushResult, { ok: true }>;
/** `POST /v1/rollback` (a previous policy that no longer validates is refused with 422). */
export type RollbackResponse = PushResponse & { readonly restoredPushId: string };
/** `GET /v1/rollouts`. */
export interface RolloutsResponse {
  readonly rollouts: readonly RolloutView[];
}
/** `GET /v1/rollouts/:id` and `POST /v1/rollouts/:id/resume`. */
export interface RolloutResponse {
  readonly rollout: RolloutView;
}
/** `GET /v1/audit`. */
export interface AuditResponse {
  readonly audit: readonly AuditEntry[];
}

// The views the operator reads: the controller builds them, the client and the CLI print them.

/** One host as `fleet status` shows it. */
export interface HostView {
  readonly id: string;
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly agentVersion: string | null;
  readonly enrolledAt: number;
  readonly lastCheckinAt: number | null;
  /** The host has not checked in within its grace. */
  readonly silent: boolean;
  readonly suspended: boolean;
  readonly decommissioned: boolean;
  readonly desiredPushId: string | null;
  readonly desiredHash: string | null;
  readonly lastAttemptedHash: string | null;
  readonly appliedHash: string | null;
  readonly liveHash: string | null;
  readonly failures: {
    readonly hash: string;
    readonly count: number;
    readonly nextAttemptAt: number | null;
    readonly lastError: string | null;
  } | null;
  readonly conditions: readonly Condition[];
}

export interface WaveView {
  readonly index: number;
  readonly state: WaveState;
  readonly hosts: readonly string[];
  readonly startedAt: number | null;
  readonly judgedAt: number | null;
}

export interface RolloutView {
  readonly id: string;
  readonly pushId: string;
  readonly state: RolloutState;
  readonly params: RolloutParams;
  readonly currentWave: number;
  readonly pausedReason: string | null;
  readonly createdAt: number;
  readonly waves: readonly WaveView[];
}

export interface EventView {
  readonly at: number;
  readonly host: string | null;
  readonly rolloutId: string | null;
  readonly kind: string;
  readonly message: string;
  readonly hash: string | null;
}

export interface AuditEntry {
  readonly at: number;
  readonly actor: string;
  readonly action: string;
  readonly target: string;
  readonly details: unknown;
}

/** What a push (or a rollback) answers: the rollout it started, or why the policy was refused. */
export type PushResult =
  | {
      readonly ok: true;
      readonly pushId: string;
      readonly rolloutId: string;
      readonly waves: readonly number[];
      readonly warnings: readonly PolicyIssue[];
      /** The push was made earlier under the same idempotency key: nothing new was pushed. */
      readonly replayed?: boolean;
    }
  | { readonly ok: false; readonly issues: readonly PolicyIssue[] };
