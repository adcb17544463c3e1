import type { Command } from 'commander';
import { OPERATOR_TOKEN_ENV } from '../../../server/index.js';
import type { CommandContext } from '../../command-context.js';
import { registerAudit } from './audit.js';
import { registerCredential } from './credential.js';
import { createRun } from './fleet-connection.js';
import { registerHostVerbs } from './host-verbs.js';
import { registerPush } from './push.js';
import { registerRollback } from './rollback.js';
import { registerRollout } from './rollout.js';
import { registerStatus } from './status.js';
import { registerToken } from './token.js';

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

/** Registers `fleet` and its subcommands, in the order its help lists them. */
export function registerFleet(program: Command, ctx: CommandContext): void {
  const fleet = program
    .command('fleet')
    .description('Steer a fleet through its controller: push, status, retry, rollouts, tokens')
    .addHelpText('after', FLEET_HELP);
  const run = createRun(ctx);
  registerPush(fleet, ctx, run);
  registerStatus(fleet, ctx, run);
  registerHostVerbs(fleet, ctx, run);
  registerRollback(fleet, ctx, run);
  registerRollout(fleet, ctx, run);
  registerToken(fleet, ctx, run);
  registerCredential(fleet, ctx, run);
  registerAudit(fleet, ctx, run);
}
