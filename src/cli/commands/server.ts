import { dirname, join, relative, resolve } from 'node:path';
import type { Command } from 'commander';
import { EgressguardError, packagePath } from '../../core/index.js';
import {
  SERVER_STATE_DIR,
  SERVER_UNIT_KINDS,
  parseListen,
  renderServerUnit,
  serverUnitPathProblem,
  startServer,
  type ServerUnitKind,
} from '../../server/index.js';
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
  metricsTokenFile?: string;
  pollInterval: string;
  printUnit?: string;
}

/** Registers `server`. */
export function registerServer(program: Command, ctx: CommandContext): void {
  const command = program.command('server');
  command
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
      '--metrics-token-file <file>',
      'the credential /metrics asks for (else $EGRESSGUARD_METRICS_TOKEN, else metrics.token, created in the state directory)',
    )
    .option(
      '--poll-interval <seconds>',
      'how long agents long-poll; a host silent for two intervals is marked so',
      '30',
    )
    .option(
      '--print-unit <kind>',
      `print the systemd service that runs this server with these options, or its user's sysusers.d entry, and exit (${SERVER_UNIT_KINDS.join(', ')})`,
    )
    .addHelpText(
      'after',
      `
Examples:
  egressguard server                                   # SQLite in ./egressguard.db, HTTPS on :8443
  egressguard server --store postgres://eg@db/fleet    # one of several replicas
  egressguard server --listen 127.0.0.1:8080 --insecure-http

On first start the server creates a CA in its state directory (ca.pem, ca.key), an operator
token (operator.token, 0600) and a metrics scrape token (metrics.token, 0600) unless given.
Bootstrap tokens carry the CA's sha256 pin. Stops on SIGINT or SIGTERM.

As a service, under its own user (systemd-analyze verify them first):
  egressguard server --print-unit sysusers > /etc/sysusers.d/egressguard-server.conf
  egressguard server --store postgres://eg@db/fleet --print-unit systemd \
    > /etc/systemd/system/egressguard-server.service
  systemd-sysusers && systemctl enable --now egressguard-server`,
    )
    .action(async (opts: ServerCommandOptions) => {
      if (opts.printUnit !== undefined) {
        printUnit(ctx, command, opts);
        return;
      }
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
        metricsTokenFile: opts.metricsTokenFile,
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

/**
 * `--print-unit`: the service runs this server with the options given on this command line, its
 * state in the directory systemd makes for it, and SQLite there unless a store was given.
 */
function printUnit(ctx: CommandContext, command: Command, opts: ServerCommandOptions): void {
  const kind = opts.printUnit as ServerUnitKind;
  if (!SERVER_UNIT_KINDS.includes(kind)) {
    throw new EgressguardError('usage', `Cannot use --print-unit "${String(opts.printUnit)}"`, {
      hint: `use one of: ${SERVER_UNIT_KINDS.join(', ')}`,
    });
  }
  // The service starts in / under ProtectSystem=strict: every path is made absolute, and what it
  // writes outside its own state directory is made writable for it.
  const writable: string[] = [];
  const pathOf = (given: string, path: string, writes: boolean): string => {
    const absolute = resolve(path);
    const problem = serverUnitPathProblem(absolute, writes);
    if (problem !== undefined) {
      throw new EgressguardError('usage', `Cannot template the service with ${given}: ${problem}`, {
        hint: `put it under ${SERVER_STATE_DIR} (the service's own state directory) or another directory outside the home directories and /tmp`,
      });
    }
    const inStateDir = !relative(SERVER_STATE_DIR, absolute).startsWith('..');
    if (writes && !inStateDir && !writable.includes(absolute)) writable.push(absolute);
    return absolute;
  };
  const args: string[] = [];
  for (const option of command.options) {
    const key = option.attributeName();
    if (key === 'printUnit' || command.getOptionValueSource(key) !== 'cli') continue;
    const value: unknown = (opts as unknown as Record<string, unknown>)[key];
    const values = Array.isArray(value) ? value : [value];
    const flag = option.long ?? '';
    for (const v of values) {
      if (typeof v === 'boolean' && v) args.push(flag);
      if (typeof v !== 'string') continue;
      if (key === 'stateDir') {
        args.push(flag, pathOf(`${flag} ${v}`, v, true));
      } else if (key === 'store' && v.startsWith('sqlite:') && v !== 'sqlite::memory:') {
        // SQLite writes its -wal and -shm files beside the database: the directory is written.
        const file = resolve(v.slice('sqlite:'.length));
        pathOf(`${flag} ${v}`, dirname(file), true);
        args.push(flag, `sqlite:${file}`);
      } else {
        const isFile =
          key.endsWith('File') || key === 'tlsCert' || key === 'tlsKey' || key === 'tlsCa';
        args.push(flag, isFile ? pathOf(`${flag} ${v}`, v, false) : v);
      }
    }
  }
  if (!args.includes('--state-dir')) args.push('--state-dir', SERVER_STATE_DIR);
  if (!args.includes('--store')) args.push('--store', `sqlite:${SERVER_STATE_DIR}/fleet.db`);
  const unit = renderServerUnit(kind, {
    node: process.execPath,
    bin: packagePath('bin', 'egressguard.js'),
    args,
    port: parseListen(opts.listen).port,
    writablePaths: writable,
  });
  ctx.output.out.write(unit.content);
  ctx.setExit(EXIT.ok);
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}
