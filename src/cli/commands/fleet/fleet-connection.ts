import type { Command } from 'commander';
import {
  createOperatorClient,
  OperatorCallError,
  type OperatorClient,
} from '../../../server/index.js';
import { formatIssue, type PolicyIssue } from '../../../policy/index.js';
import type { CommandContext } from '../../command-context.js';
import { EXIT } from '../../exit-codes.js';
import { defaultServerUrl, serverStateDir } from '../../fleet-options.js';
import { paint, printJson, type Output } from '../../output.js';

/** The options every fleet command takes to reach the controller. */
export interface ConnectOptions {
  server?: string;
  stateDir?: string;
  caFile?: string;
  operatorTokenFile?: string;
  json?: boolean;
}

/** Adds the options that reach the controller. */
export function withConnection(command: Command): Command {
  return command
    .option('--server <url>', 'the controller ($EGRESSGUARD_SERVER, else https://127.0.0.1:8443)')
    .option('--state-dir <dir>', 'the server state directory holding ca.pem and operator.token')
    .option('--ca-file <file>', "the controller's CA certificate")
    .option('--operator-token-file <file>', 'the operator token')
    .option('--json', 'print JSON');
}

/** A fleet command's action: what it does with the client, and the exit code it ends with. */
export type FleetAction<A extends unknown[]> = (
  client: OperatorClient,
  opts: ConnectOptions,
  ...args: A
) => Promise<number>;

/**
 * Wraps a fleet command's action for commander: connects, runs it, sets the exit code, shows a
 * refused policy's problems, and closes the connection.
 */
export function createRun(ctx: CommandContext) {
  return <A extends unknown[]>(action: FleetAction<A>) =>
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
}

/** The runner `createRun` makes. */
export type FleetRun = ReturnType<typeof createRun>;

function reportPolicyProblems(output: Output, error: OperatorCallError, json: boolean): void {
  const issues = error.issues as PolicyIssue[];
  if (json) {
    printJson(output, { error: { code: 'policy-invalid', message: error.message, issues } });
    return;
  }
  output.err.write(`${paint(output, 'red', 'error')}: ${error.message}\n`);
  for (const issue of issues) output.err.write(`${formatIssue(issue)}\n`);
}
