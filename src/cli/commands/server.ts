import { join } from 'node:path';
import type { Command } from 'commander';
import { startServer } from '../../server/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import { parseWholeNumber, serverStateDir } from '../fleet-options.js';

interface ServerCommandOptions {
  store: string;
  listen: string;
  stateDir?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsCa?: string;
  tlsName: string[];
  insecureHttp?: boolean;
  operatorTokenFile?: string;
  pollInterval: string;
}

/** Registers `server`. */
export function registerServer(program: Command, ctx: CommandContext): void {
  program
    .command('server')
    .description('Run a fleet controller: enrollment, bundles, status, rollouts in waves, metrics')
    .option(
      '--store <url>',
      'sqlite:PATH (one replica) or postgres://… (several)',
      'sqlite:./egressguard.db',
    )
    .option('--listen <addr>', 'HOST:PORT, [IPV6]:PORT or :PORT', ':8443')
    .option('--state-dir <dir>', 'where the CA and the generated operator token live')
    .option(
      '--tls-cert <file>',
      'serve this certificate (chain) instead of one from the built-in CA',
    )
    .option('--tls-key <file>', 'the key of --tls-cert')
    .option(
      '--tls-ca <file>',
      'the CA that agents pin (default: the last certificate of --tls-cert)',
    )
    .option(
      '--tls-name <name>',
      'another DNS name or address for the built-in CA’s certificate',
      collect,
      [],
    )
    .option('--insecure-http', 'serve plain HTTP (loopback addresses only)')
    .option(
      '--operator-token-file <file>',
      'the operator token (else $EGRESSGUARD_OPERATOR_TOKEN, else created in the state directory)',
    )
    .option(
      '--poll-interval <seconds>',
      'how long agents long-poll; a host silent for two intervals is marked so',
      '30',
    )
    .addHelpText(
      'after',
      `
Examples:
  egressguard server                                   # SQLite in ./egressguard.db, HTTPS on :8443
  egressguard server --store postgres://eg@db/fleet    # one of several replicas
  egressguard server --listen 127.0.0.1:8080 --insecure-http

On first start the server creates a CA in its state directory (ca.pem, ca.key) and an operator
token (operator.token, 0600) unless one is given. Bootstrap tokens carry the CA's sha256 pin.
Stops on SIGINT or SIGTERM.`,
    )
    .action(async (opts: ServerCommandOptions) => {
      const stateDir = opts.stateDir ?? serverStateDir();
      const pollSeconds = parseWholeNumber(opts.pollInterval, '--poll-interval', 1);
      const server = await startServer({
        store: opts.store,
        listen: opts.listen,
        stateDir,
        insecureHttp: opts.insecureHttp === true,
        tlsCertFile: opts.tlsCert,
        tlsKeyFile: opts.tlsKey,
        tlsCaFile: opts.tlsCa,
        tlsNames: opts.tlsName,
        operatorTokenFile: opts.operatorTokenFile,
        pollIntervalMs: pollSeconds * 1000,
        log: (line) => ctx.output.err.write(`${line}\n`),
      });
      if (server.caPin !== null) {
        ctx.output.err.write(`CA certificate: ${join(stateDir, 'ca.pem')}\n`);
      }
      await new Promise<void>((resolve) => {
        // `on`, not `once`: see run.ts (execa's signal-exit).
        process.on('SIGINT', () => {
          resolve();
        });
        process.on('SIGTERM', () => {
          resolve();
        });
      });
      await server.close();
      ctx.setExit(EXIT.ok);
    });
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}
