import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { Option, type Command } from 'commander';
import { registry } from '../../../backends/index.js';
import { EgressguardError, isEgressguardError } from '../../../core/index.js';
import { formatIssue, hasErrors, inlineListFiles, loadPolicy } from '../../../policy/index.js';
import { OperatorCallError } from '../../../server/index.js';
import type { CommandContext } from '../../command-context.js';
import { EXIT } from '../../exit-codes.js';
import { parseDurationMs, parseWholeNumber } from '../../fleet-options.js';
import { paint, printJson, printLine, type Output } from '../../output.js';
import { backendOptionsOf, type TargetOptions } from '../../target-options.js';
import { withConnection, type ConnectOptions, type FleetRun } from './fleet-connection.js';

/** `fleet push`: validate a policy and roll it out in waves. */
export function registerPush(fleet: Command, ctx: CommandContext, run: FleetRun): void {
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
      // Options never set are left off (JSON would drop them anyway): the wire carries strings.
      const options = Object.fromEntries(
        Object.entries(backendOptionsOf(opts as TargetOptions, pushable)).filter(
          (entry): entry is [string, string] => entry[1] !== undefined,
        ),
      );
      const idempotencyKey = o.idempotencyKey ?? `k${randomUUID()}`;
      const result = await callWithRetries(
        () =>
          client.push({
            policy: text,
            source: basename(file),
            rollout,
            idempotencyKey,
            ...(Object.keys(options).length === 0 ? {} : { options }),
          }),
        idempotencyKey,
      );
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
async function callWithRetries<T>(call: () => Promise<T>, key: string): Promise<T> {
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
