import { Command, CommanderError } from 'commander';
import { isEgressguardError } from '../core/index.js';
import type { CommandContext } from './command-context.js';
import { registerCommands } from './commands/index.js';
import { EXIT } from './exit-codes.js';
import { createOutput, paint, type Output } from './output.js';
import { isVersionRequest, printVersion } from './version-report.js';

const EXIT_HELP = `
Exit codes:
  0  success (check: valid, warnings allowed)
  1  the policy is invalid, a probe disagrees, or a check failed
  2  bad usage or a runtime error
  3  status: drift between applied and live state`;

/** Builds the program for these arguments; each action stores its exit code. */
export async function createProgram(
  args: readonly string[],
  output: Output,
  exits: Pick<CommandContext, 'setExit' | 'setErrorExit'>,
): Promise<Command> {
  const program = new Command('egressguard')
    .description(
      'Declare which way each class of workload may leave a host, enforce it fail-closed, and prove it',
    )
    .option(
      '-V, --version',
      "print the version, the commit, Node.js, and each backend with its tools' versions (--json too)",
    )
    .showHelpAfterError('(add --help for usage)')
    .addHelpText('after', EXIT_HELP)
    .configureOutput({
      writeOut: (s) => output.out.write(s),
      writeErr: (s) => output.err.write(s),
    })
    .exitOverride();

  const context: CommandContext = { output, ...exits };
  await registerCommands(program, context, args);

  return program;
}

/** Runs the CLI and returns the exit code (bin/egressguard.js sets it). */
export async function main(
  argv: readonly string[],
  output: Output = createOutput(),
): Promise<number> {
  let exitCode: number = EXIT.ok;
  let errorExit: number = EXIT.error;
  try {
    if (isVersionRequest(argv.slice(2))) {
      await printVersion(output, argv.includes('--json'));
      return EXIT.ok;
    }
    const program = await createProgram(argv.slice(2), output, {
      setExit: (code) => {
        exitCode = code;
      },
      setErrorExit: (code) => {
        errorExit = code;
      },
    });
    await program.parseAsync([...argv]);
    return exitCode;
  } catch (error) {
    if (error instanceof CommanderError) {
      return error.exitCode === 0 ? EXIT.ok : EXIT.error;
    }
    const known = isEgressguardError(error);
    const report = {
      code: known ? error.code : 'internal',
      message: known
        ? error.message
        : `Internal error: ${error instanceof Error ? error.message : String(error)}`,
      hint: known
        ? error.hint
        : 'this is a bug in egressguard: please report it with the command you ran (EGRESSGUARD_DEBUG=1 prints the stack)',
    };
    if (argv.includes('--json')) {
      output.out.write(`${JSON.stringify({ error: report }, null, 2)}\n`);
    } else {
      output.err.write(`${paint(output, 'red', 'error')}: ${report.message}\n`);
      if (report.hint !== undefined)
        output.err.write(`${paint(output, 'dim', `hint: ${report.hint}`)}\n`);
    }
    if (!known && process.env['EGRESSGUARD_DEBUG'] === '1' && error instanceof Error) {
      output.err.write(`${error.stack ?? ''}\n`);
    }
    return known && error.code === 'policy-invalid' ? EXIT.failed : errorExit;
  }
}
