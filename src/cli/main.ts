import { Command, CommanderError, Option } from 'commander';
import { isEgressguardError } from '../core/index.js';
import { runCheck } from './commands/check.js';
import { runCompile } from './commands/compile.js';
import { runExplain } from './commands/explain.js';
import { runFacts } from './commands/facts.js';
import { runSchema } from './commands/schema.js';
import { EXIT } from './exit-codes.js';
import { createOutput, paint, type Output } from './output.js';
import { VERSION } from './version.js';

const EXIT_HELP = `
Exit codes:
  0  success (check: valid, warnings allowed)
  1  the policy is invalid, a probe disagrees, or a check failed
  2  bad usage or a runtime error
  3  status: drift between applied and live state`;

/** Builds the program; each action stores its exit code. */
export function createProgram(output: Output, setExit: (code: number) => void): Command {
  const program = new Command('egressguard')
    .description(
      'Declare which way each class of workload may leave a host, enforce it fail-closed, and prove it',
    )
    .version(VERSION)
    .showHelpAfterError('(add --help for usage)')
    .addHelpText('after', EXIT_HELP)
    .configureOutput({
      writeOut: (s) => output.out.write(s),
      writeErr: (s) => output.err.write(s),
    })
    .exitOverride();

  program
    .command('check')
    .description('Validate policies and evaluate their probes with the reference evaluator')
    .argument('<policy...>', 'policy files (YAML)')
    .option('--facts <file>', 'host facts (default: facts.json beside each policy)')
    .option('--json', 'print the issues and probe results as JSON')
    .addHelpText(
      'after',
      '\nExample:\n  egressguard check testdata/policies/valid/linux-vpn-gateway/policy.yaml',
    )
    .action((files: string[], opts: { facts?: string; json?: boolean }) => {
      setExit(runCheck(files, opts, output));
    });

  program
    .command('explain')
    .description(
      'What happens to one packet: class, verdict, deciding rule, exit interface, layers',
    )
    .argument('<policy>', 'policy file (YAML)')
    .requiredOption('--from <ip>', 'source address')
    .requiredOption('--to <ip>', 'destination address')
    .option('--in <iface>', 'ingress interface (default: found from the source)')
    .option('--proto <proto>', 'tcp, udp, icmp, gre, esp, ah, sctp or a number', 'tcp')
    .option('--port <n>', 'destination port')
    .addOption(new Option('--tunnel <state>', 'tunnel state').choices(['up', 'down']).default('up'))
    .option('--facts <file>', 'host facts (default: facts.json beside the policy)')
    .option('--json', 'print JSON: class, verdict, rule, via, layers, …')
    .addHelpText(
      'after',
      '\nExample:\n  egressguard explain testdata/policies/valid/linux-vpn-gateway/policy.yaml \\\n    --from 10.10.0.5 --to 203.0.113.7 --proto tcp --port 443 --tunnel down',
    )
    .action((file: string, opts: Parameters<typeof runExplain>[1]) => {
      setExit(runExplain(file, opts, output));
    });

  program
    .command('compile')
    .description('Compile a policy for a backend and print (or write) the artifacts, hash-stamped')
    .argument('<policy>', 'policy file (YAML)')
    .option('--target <backend>', "backend (default: the one for the facts' OS)")
    .option('--facts <file>', 'host facts (default: facts.json beside the policy)')
    .option('--table <name>', 'owned table name', 'egressguard')
    .option('--out <dir>', 'write the artifacts into this directory')
    .option('--json', 'print the artifacts and the hash as JSON')
    .action((file: string, opts: Parameters<typeof runCompile>[1]) => {
      setExit(runCompile(file, opts, output));
    });

  program
    .command('schema')
    .description('Print the JSON Schema of policy v1 (for editor completion)')
    .action(() => {
      setExit(runSchema(output));
    });

  program
    .command('facts')
    .description('Read host facts: interfaces, addresses, routes, uplink, OS and tool versions')
    .option('--netns <name>', 'read inside this network namespace')
    .option('--policy <file>', "resolve the uplink excluding this policy's tunnels")
    .option('--label <key=value...>', 'labels to record for this host')
    .option('--json', 'print facts.json (usable as --facts)')
    .action(async (opts: Parameters<typeof runFacts>[0]) => {
      setExit(await runFacts(opts, output));
    });

  return program;
}

/** Runs the CLI and returns the exit code (bin/egressguard.js sets it). */
export async function main(
  argv: readonly string[],
  output: Output = createOutput(),
): Promise<number> {
  let exitCode: number = EXIT.ok;
  const program = createProgram(output, (code) => {
    exitCode = code;
  });
  try {
    await program.parseAsync([...argv]);
    return exitCode;
  } catch (error) {
    if (error instanceof CommanderError) {
      return error.exitCode === 0 ? EXIT.ok : EXIT.error;
    }
    if (isEgressguardError(error)) {
      output.err.write(`${paint(output, 'red', 'error')}: ${error.message}\n`);
      if (error.hint !== undefined)
        output.err.write(`${paint(output, 'dim', `hint: ${error.hint}`)}\n`);
      return EXIT.error;
    }
    throw error;
  }
}
