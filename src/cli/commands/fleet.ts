import { randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { basename } from 'node:path';
import { Option, type Command } from 'commander';
import { registry } from '../../backends/index.js';
import { EgressguardError, isEgressguardError } from '../../core/index.js';
import type { AuditEntry, EventView, HostView, RolloutView } from '../../fleet/index.js';
import {
  formatIssue,
  hasErrors,
  inlineListFiles,
  loadPolicy,
  type PolicyIssue,
} from '../../policy/index.js';
import {
  createOperatorClient,
  OperatorCallError,
  OPERATOR_TOKEN_ENV,
  type OperatorClient,
} from '../../server/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import {
  defaultServerUrl,
  parseDurationMs,
  parseWholeNumber,
  serverStateDir,
} from '../fleet-options.js';
import { parseLabel } from '../../facts/index.js';
import { paint, printJson, printLine, printTable, type Output } from '../output.js';
import { backendOptionsOf, type TargetOptions } from '../target-options.js';

interface ConnectOptions {
  server?: string;
  stateDir?: string;
  caFile?: string;
  operatorTokenFile?: string;
  json?: boolean;
}

const FLEET_HELP = `
Every fleet command calls the controller's operator API with the operator token, read from
--operator-token-file, else $${OPERATOR_TOKEN_ENV}, else the server state directory's
operator.token (never from the command line), and verifies the controller with its CA (--ca-file,
else ca.pem in the server state directory).

Examples:
  egressguard fleet token create --uses 10 --out /tmp/bootstrap.token
  egressguard fleet push policy.yaml --canary 1 --max-unavailable 5 --bake 2m
  egressguard fleet status
  egressguard fleet retry runner-3
  egressguard fleet rollout resume
  egressguard fleet rollback

Exit codes:
  0  done (status: every host Ready)
  1  the policy is invalid (push), or some host is not Ready (status)
  2  bad usage, the controller refused the call, or it could not be reached`;

/** Registers `fleet` and its subcommands. */
export function registerFleet(program: Command, ctx: CommandContext): void {
  const fleet = program
    .command('fleet')
    .description('Steer a fleet through its controller: push, status, retry, rollouts, tokens')
    .addHelpText('after', FLEET_HELP);

  const withConnection = (command: Command): Command =>
    command
      .option('--server <url>', 'the controller ($EGRESSGUARD_SERVER, else https://127.0.0.1:8443)')
      .option('--state-dir <dir>', 'the server state directory holding ca.pem and operator.token')
      .option('--ca-file <file>', "the controller's CA certificate")
      .option('--operator-token-file <file>', 'the operator token')
      .option('--json', 'print JSON');

  const run =
    <A extends unknown[]>(
      action: (client: OperatorClient, opts: ConnectOptions, ...args: A) => Promise<number>,
    ) =>
    async (...args: [...A, ConnectOptions, Command]): Promise<void> => {
      const opts = args[args.length - 2] as ConnectOptions;
      const client = createOperatorClient({
        server: opts.server ?? defaultServerUrl(),
        stateDir: opts.stateDir ?? serverStateDir(),
        caFile: opts.caFile,
        operatorTokenFile: opts.operatorTokenFile,
      });
      try {
        ctx.setExit(await action(client, opts, ...(args.slice(0, -2) as A)));
      } catch (error) {
        if (error instanceof OperatorCallError && error.status === 422) {
          reportPolicyProblems(ctx.output, error, opts.json === true);
          ctx.setExit(EXIT.failed);
          return;
        }
        throw error;
      } finally {
        client.close();
      }
    };

  const push = fleet.command('push');
  // Backend options ride with the push (no defaults here: a host's agent applies the backend's),
  // except those only a host sets (the controller refuses them).
  const pushable = registry.options().filter(({ option }) => option.hostOnly !== true);
  for (const { option, backends } of pushable) {
    push.addOption(
      new Option(option.flag, `${option.description} (${backends.join(', ')}), on every host`),
    );
  }
  withConnection(
    push
      .description('Validate a policy and roll it out in waves (canary first)')
      .argument('<policy>', 'policy file (YAML)')
      .option('--canary <n>', 'hosts in the first wave (0: no canary)', '1')
      .option(
        '--max-unavailable <n>',
        'hosts changed at once in every later wave (default: a tenth of the fleet)',
      )
      .option(
        '--bake <duration>',
        'how long a wave must stay converged before the next starts',
        '60s',
      )
      .option('--max-failures <n>', 'failing hosts a wave tolerates before the rollout pauses', '0')
      .option(
        '--idempotency-key <key>',
        'the key of this push: sent again with it, it is never pushed twice (default: a new one, kept across the retries of this command)',
      ),
  ).action(
    run(async (client, opts, file: string) => {
      const o = opts as ConnectOptions & {
        canary: string;
        maxUnavailable?: string;
        bake: string;
        maxFailures: string;
        idempotencyKey?: string;
      };
      const text = readPolicyToPush(ctx.output, file, opts.json === true);
      if (text === undefined) return EXIT.failed;
      const rollout = {
        canary: parseWholeNumber(o.canary, '--canary'),
        bakeMs: parseDurationMs(o.bake, '--bake'),
        maxFailures: parseWholeNumber(o.maxFailures, '--max-failures'),
        ...(o.maxUnavailable === undefined
          ? {}
          : { maxUnavailable: parseWholeNumber(o.maxUnavailable, '--max-unavailable', 1) }),
      };
      const options = backendOptionsOf(opts as TargetOptions, pushable);
      const idempotencyKey = o.idempotencyKey ?? `k${randomUUID()}`;
      const result = (await callWithRetries(
        () =>
          client.call('POST', '/v1/pushes', {
            policy: text,
            source: basename(file),
            rollout,
            idempotencyKey,
            ...(Object.keys(options).length === 0 ? {} : { options }),
          }),
        idempotencyKey,
      )) as {
        pushId: string;
        rolloutId: string;
        waves: number[];
        warnings: PolicyIssue[];
      };
      if (opts.json === true) printJson(ctx.output, result);
      else {
        for (const warning of result.warnings) printLine(ctx.output, formatIssue(warning));
        printLine(
          ctx.output,
          `pushed ${result.pushId}: rollout ${result.rolloutId} in ${result.waves.length} waves (${result.waves.join(', ')} hosts)`,
        );
      }
      return EXIT.ok;
    }),
  );

  withConnection(
    fleet
      .command('status')
      .description("Every host's conditions, hashes and last check-in; or one host with its events")
      .argument('[host]', 'one host, with its recent events'),
  ).action(
    run(async (client, opts, host: string | undefined) => {
      if (host !== undefined) {
        const [{ host: view }, { events }] = (await Promise.all([
          client.call('GET', `/v1/hosts/${encodeURIComponent(host)}`),
          client.call('GET', `/v1/hosts/${encodeURIComponent(host)}/events?limit=20`),
        ])) as [{ host: HostView }, { events: EventView[] }];
        if (opts.json === true) printJson(ctx.output, { host: view, events });
        else printHost(ctx.output, view, events);
        return isReady(view) ? EXIT.ok : EXIT.failed;
      }
      const [{ hosts }, { rollouts }] = (await Promise.all([
        client.call('GET', '/v1/hosts'),
        client.call('GET', '/v1/rollouts'),
      ])) as [{ hosts: HostView[] }, { rollouts: RolloutView[] }];
      if (opts.json === true) printJson(ctx.output, { hosts, rollouts });
      else printFleet(ctx.output, hosts, rollouts);
      return hosts.every(isReady) ? EXIT.ok : EXIT.failed;
    }),
  );

  const verbs = [
    ['retry', 'Re-arm a host’s failure budget: its agent tries again now'],
    ['force', 'Make a host’s agent apply its bundle again, even when nothing changed'],
    ['suspend', 'Stop a host from taking new bundles (it keeps enforcing what it has)'],
    ['resume', 'Let a suspended host take new bundles again'],
    ['decommission', 'Retire a host: revoke its credentials and stop its agent (history is kept)'],
  ] as const;
  for (const [verb, description] of verbs) {
    withConnection(
      fleet.command(verb).description(description).argument('<host>', 'host name'),
    ).action(
      run(async (client, opts, host: string) => {
        const { host: view } = (await client.call(
          'POST',
          `/v1/hosts/${encodeURIComponent(host)}/${verb}`,
        )) as { host: HostView };
        if (opts.json === true) printJson(ctx.output, view);
        else printLine(ctx.output, `${verb}: ${view.name} (${summarise(view)})`);
        return EXIT.ok;
      }),
    );
  }

  withConnection(
    fleet
      .command('rollback')
      .description('Roll the fleet back to the policy pushed before the current one, in one wave'),
  ).action(
    run(async (client, opts) => {
      const result = (await client.call('POST', '/v1/rollback', {})) as {
        pushId: string;
        rolloutId: string;
        restoredPushId: string;
      };
      if (opts.json === true) printJson(ctx.output, result);
      else
        printLine(
          ctx.output,
          `rolled back to the policy of ${result.restoredPushId}: push ${result.pushId}, rollout ${result.rolloutId}`,
        );
      return EXIT.ok;
    }),
  );

  const rollout = fleet.command('rollout').description('Inspect and resume rollouts');
  withConnection(
    rollout
      .command('resume')
      .description('Continue a paused rollout: accept its paused wave and start the next')
      .argument('[id]', 'rollout id (default: the newest paused one)'),
  ).action(
    run(async (client, opts, id: string | undefined) => {
      const { rollout: view } = (await client.call(
        'POST',
        `/v1/rollouts/${encodeURIComponent(id ?? 'latest')}/resume`,
      )) as { rollout: RolloutView };
      if (opts.json === true) printJson(ctx.output, view);
      else printRollout(ctx.output, view);
      return EXIT.ok;
    }),
  );
  withConnection(
    rollout
      .command('status')
      .description('Recent rollouts and their waves')
      .argument('[id]', 'one rollout'),
  ).action(
    run(async (client, opts, id: string | undefined) => {
      const rollouts =
        id === undefined
          ? ((await client.call('GET', '/v1/rollouts')) as { rollouts: RolloutView[] }).rollouts
          : [
              (
                (await client.call('GET', `/v1/rollouts/${encodeURIComponent(id)}`)) as {
                  rollout: RolloutView;
                }
              ).rollout,
            ];
      if (opts.json === true) printJson(ctx.output, rollouts);
      else for (const view of rollouts) printRollout(ctx.output, view);
      return EXIT.ok;
    }),
  );

  const token = fleet.command('token').description('Bootstrap tokens that enroll agents');
  withConnection(
    token
      .command('create')
      .description('Mint a bootstrap token (it carries the controller CA’s pin)')
      .option('--uses <n>', 'how many hosts it may enroll', '1')
      .option('--ttl <duration>', 'how long it stays valid', '24h')
      .option(
        '--label <key=value>',
        'a label for every host it enrolls (repeatable)',
        (v: string, p: string[]) => [...p, v],
        [],
      )
      .option('--out <file>', 'write the token to this file (0600) instead of printing it'),
  ).action(
    run(async (client, opts) => {
      const o = opts as ConnectOptions & {
        uses: string;
        ttl: string;
        label: string[];
        out?: string;
      };
      const labels = Object.fromEntries(o.label.map((entry) => parseLabel(entry, '--label')));
      const ttlMs = parseDurationMs(o.ttl, '--ttl');
      const created = (await client.call('POST', '/v1/tokens', {
        uses: parseWholeNumber(o.uses, '--uses', 1),
        ttlSeconds: Math.max(1, Math.round(ttlMs / 1000)),
        labels,
      })) as { token: string; id: string; expiresAt: number };
      if (o.out !== undefined) writeFileSync(o.out, `${created.token}\n`, { mode: 0o600 });
      if (opts.json === true)
        printJson(
          ctx.output,
          o.out === undefined
            ? created
            : { id: created.id, expiresAt: created.expiresAt, file: o.out },
        );
      else if (o.out !== undefined)
        printLine(
          ctx.output,
          `wrote token ${created.id} to ${o.out} (expires ${new Date(created.expiresAt).toISOString()})`,
        );
      else printLine(ctx.output, created.token);
      return EXIT.ok;
    }),
  );

  const credential = fleet.command('credential').description('Host credentials');
  withConnection(
    credential
      .command('revoke')
      .description('Revoke every credential of a host')
      .argument('<host>', 'host name'),
  ).action(
    run(async (client, opts, host: string) => {
      const result = (await client.call(
        'POST',
        `/v1/hosts/${encodeURIComponent(host)}/credentials/revoke`,
      )) as { revoked: number };
      if (opts.json === true) printJson(ctx.output, result);
      else printLine(ctx.output, `revoked ${result.revoked} credential(s) of ${host}`);
      return EXIT.ok;
    }),
  );

  withConnection(
    fleet
      .command('audit')
      .description('The audit log: pushes, retries, forces, rollbacks, revocations')
      .option('--limit <n>', 'entries', '50'),
  ).action(
    run(async (client, opts) => {
      const limit = parseWholeNumber((opts as { limit: string }).limit, '--limit', 1);
      const { audit } = (await client.call('GET', `/v1/audit?limit=${limit}`)) as {
        audit: AuditEntry[];
      };
      if (opts.json === true) printJson(ctx.output, audit);
      else
        for (const entry of audit)
          printLine(
            ctx.output,
            `${new Date(entry.at).toISOString()} ${entry.actor} ${entry.action} ${entry.target}`,
          );
      return EXIT.ok;
    }),
  );
}

/**
 * The policy text to push: validated here first (its list files read on this side, every problem
 * shown with this file's lines), then with each `files:` list put into the text, since the
 * controller never opens a path a policy names. Undefined when the policy is invalid.
 */
function readPolicyToPush(output: Output, file: string, json: boolean): string | undefined {
  const checked = loadPolicy(file);
  if (hasErrors(checked.issues)) {
    const message = `Cannot push policy "${file}": it has ${checked.issues.length} problem(s)`;
    if (json)
      printJson(output, { error: { code: 'policy-invalid', message, issues: checked.issues } });
    else {
      output.err.write(`${paint(output, 'red', 'error')}: ${message}\n`);
      for (const issue of checked.issues) output.err.write(`${formatIssue(issue)}\n`);
    }
    return undefined;
  }
  return inlineListFiles(readFileSync(file, 'utf8'), file);
}

/**
 * Calls again, with the same idempotency key, when the controller could not be reached or
 * answered 5xx (its store away or its disk full): a push it committed before the error is
 * answered, never made twice. Refusals (4xx) are final.
 */
async function callWithRetries(call: () => Promise<unknown>, key: string): Promise<unknown> {
  const delays = [500, 1_000, 2_000, 4_000];
  for (let attempt = 0; ; attempt += 1) {
    try {
      return await call();
    } catch (error) {
      const transient =
        (error instanceof OperatorCallError && error.status >= 500) ||
        (isEgressguardError(error) && error.code === 'io');
      const delay = delays[attempt];
      if (!transient || delay === undefined) {
        if (!transient) throw error;
        throw new EgressguardError(
          'command-failed',
          `${(error as Error).message}; the push was tried ${attempt + 1} times`,
          {
            cause: error,
            hint: `run it again with --idempotency-key ${key}: a push the controller took under that key is not pushed twice`,
          },
        );
      }
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}

function isReady(host: HostView): boolean {
  return host.conditions.some((c) => c.type === 'Ready' && c.status === 'True');
}

function summarise(host: HostView): string {
  const ready = host.conditions.find((c) => c.type === 'Ready');
  const problems = host.conditions.filter(
    (c) => (c.type === 'Degraded' || c.type === 'Stalled') && c.status === 'True',
  );
  return [
    `Ready=${ready?.status ?? '?'} (${ready?.reason ?? '?'})`,
    ...problems.map((c) => `${c.type}: ${c.reason}`),
  ].join(', ');
}

function printFleet(
  output: Output,
  hosts: readonly HostView[],
  rollouts: readonly RolloutView[],
): void {
  const rows = hosts.map((h) => {
    const status = (type: string): string =>
      h.conditions.find((c) => c.type === type)?.status ?? '?';
    return [
      h.name,
      status('Ready'),
      status('Progressing'),
      status('Degraded'),
      status('Stalled'),
      short(h.desiredHash),
      short(h.appliedHash),
      short(h.liveHash),
      h.lastCheckinAt === null ? 'never' : `${ago(h.lastCheckinAt)}${h.silent ? ' SILENT' : ''}`,
      h.suspended
        ? 'suspended'
        : (h.conditions.find(
            (c) => c.status !== 'False' && c.type !== 'Progressing' && c.reason !== 'Converged',
          )?.reason ?? ''),
    ];
  });
  printTable(
    output,
    [
      'HOST',
      'READY',
      'PROGRESSING',
      'DEGRADED',
      'STALLED',
      'DESIRED',
      'APPLIED',
      'LIVE',
      'CHECK-IN',
      'REASON',
    ],
    rows,
  );
  const active = rollouts.filter((r) => r.state === 'progressing' || r.state === 'paused');
  for (const r of active) printRollout(output, r);
  const notReady = hosts.filter((h) => !isReady(h)).length;
  printLine(
    output,
    paint(
      output,
      notReady === 0 ? 'green' : 'yellow',
      `${hosts.length} hosts, ${hosts.length - notReady} Ready`,
    ),
  );
}

function printHost(output: Output, host: HostView, events: readonly EventView[]): void {
  printLine(
    output,
    paint(output, 'bold', host.name) + (host.silent ? paint(output, 'yellow', ' (silent)') : ''),
  );
  printLine(
    output,
    `  desired ${host.desiredHash ?? '-'}\n  applied ${host.appliedHash ?? '-'}\n  live    ${host.liveHash ?? '-'}`,
  );
  if (host.failures !== null) {
    printLine(
      output,
      `  failures: ${host.failures.count} at ${short(host.failures.hash)}; next attempt ${host.failures.nextAttemptAt === null ? 'unknown' : new Date(host.failures.nextAttemptAt).toISOString()}`,
    );
  }
  for (const c of host.conditions) {
    printLine(
      output,
      `  ${c.type}=${c.status} ${c.reason} since ${new Date(c.lastTransitionTime).toISOString()}: ${c.message}`,
    );
  }
  printLine(output, '  events:');
  for (const e of events)
    printLine(output, `    ${new Date(e.at).toISOString()} ${e.kind}: ${e.message}`);
}

function printRollout(output: Output, rollout: RolloutView): void {
  const waves = rollout.waves.map((w) => `${w.index}:${w.state}(${w.hosts.length})`).join(' ');
  printLine(
    output,
    `rollout ${rollout.id} (push ${rollout.pushId}) ${rollout.state}, wave ${rollout.currentWave}: ${waves}${rollout.pausedReason === null ? '' : ` — ${rollout.pausedReason}`}`,
  );
}

function reportPolicyProblems(output: Output, error: OperatorCallError, json: boolean): void {
  const issues = error.issues as PolicyIssue[];
  if (json) {
    printJson(output, { error: { code: 'policy-invalid', message: error.message, issues } });
    return;
  }
  output.err.write(`${paint(output, 'red', 'error')}: ${error.message}\n`);
  for (const issue of issues) output.err.write(`${formatIssue(issue)}\n`);
}

function short(hash: string | null): string {
  return hash === null ? '-' : hash.slice(0, 12);
}

function ago(at: number): string {
  const seconds = Math.max(0, Math.round((Date.now() - at) / 1000));
  return seconds < 120
    ? `${seconds}s ago`
    : seconds < 7200
      ? `${Math.round(seconds / 60)}m ago`
      : `${Math.round(seconds / 3600)}h ago`;
}
