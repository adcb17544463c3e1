import { createServer } from 'node:http';
import { hostname } from 'node:os';
import { resolve } from 'node:path';
import type { Command } from 'commander';
import {
  AGENT_UNIT_KINDS,
  renderAgentUnit,
  type AgentUnitKind,
  createAgentMetrics,
  createBundleHasher,
  createFirewallEngine,
  createRecordingEngine,
  runAgent,
  type HostEngine,
} from '../../agent/index.js';
import { registry } from '../../backends/index.js';
import { EgressguardError, packagePath } from '../../core/index.js';
import { gatherFacts, readHostFacts } from '../../facts/index.js';
import { createHostTarget } from '../../host/index.js';
import { requireNamespace } from '../../runner/index.js';
import { parseListen } from '../../server/index.js';
import type { CommandContext } from '../command-context.js';
import { parseDurationMs } from '../fleet-options.js';
import { addBackendOptions, backendOptionsOf } from '../target-options.js';
import { EXIT } from '../exit-codes.js';
import { VERSION } from '../../core/index.js';

interface AgentCommandOptions {
  server: string;
  tokenFile: string;
  stateDir?: string;
  netns?: string;
  engine: string;
  facts?: string;
  hostname?: string;
  metricsListen?: string;
  retryBase: string;
  retryCap: string;
  startJitter: string;
  printUnit?: string;
  [backendOption: string]: unknown;
}

/** Registers `agent`. */
export function registerAgent(program: Command, ctx: CommandContext): void {
  const command = program.command('agent');
  // The scope the agent owns (its table, its anchor): a bundle that would move it is refused.
  addBackendOptions(command, registry.options());
  command
    .description(
      'Run a fleet agent: enroll once, long-poll for this host’s bundle, apply it, report',
    )
    .requiredOption('--server <url>', 'the controller, https://HOST:PORT')
    .requiredOption('--token-file <file>', 'the bootstrap token (read once, at enrollment)')
    .option('--state-dir <dir>', 'where the credential and the pinned CA are kept')
    .option('--netns <name>', 'the network namespace this agent manages (every command runs in it)')
    .option(
      '--engine <name>',
      'how bundles reach the host: firewall, or recording (records them, changes nothing; benchmarks and tests)',
      'firewall',
    )
    .option(
      '--facts <file>',
      'host facts from this file, read every round, instead of the live host’s (macOS; tests)',
    )
    .option('--retry-base <duration>', 'first delay after a failed apply (doubles each time)', '1s')
    .option('--retry-cap <duration>', 'longest delay between attempts (they never stop)', '15m')
    .option('--start-jitter <duration>', 'wait up to this long before the first poll', '5s')
    .option('--hostname <name>', 'the name to enroll under (default: this machine’s)')
    .option('--metrics-listen <addr>', 'serve Prometheus metrics on HOST:PORT')
    .option(
      '--print-unit <kind>',
      `print the service that runs this agent with these options and exit (${AGENT_UNIT_KINDS.join(', ')})`,
    )
    .addHelpText(
      'after',
      `
Examples:
  egressguard agent --server https://controller:8443 --token-file /etc/egressguard/bootstrap.token
  egressguard agent --server https://127.0.0.1:8443 --token-file t --engine recording --facts facts.json
  egressguard agent --server https://controller:8443 --token-file /etc/egressguard/bootstrap.token \
    --print-unit systemd > /etc/systemd/system/egressguard-agent.service

The agent pins the controller's CA from the bootstrap token and refuses a controller whose
certificate does not chain to it. Its credential is stored (0600) in the state directory.
Stops on SIGINT or SIGTERM; a decommissioned host's agent stops by itself (exit 0), and so does
one whose credential was revoked (exit 1). After any other error the agent waits longer each time
(1 s doubling to 60 s, jittered, at least the controller's Retry-After) and never stops trying.`,
    )
    .action(async (opts: AgentCommandOptions) => {
      if (opts.printUnit !== undefined) {
        printUnit(ctx, command, opts);
        return;
      }
      if (opts.engine !== 'firewall' && opts.engine !== 'recording') {
        throw new EgressguardError('usage', `Cannot use --engine "${opts.engine}"`, {
          hint: 'use firewall (the default: applies to this host) or recording (changes nothing)',
        });
      }
      const backoff = {
        baseMs: parseDurationMs(opts.retryBase, '--retry-base'),
        capMs: parseDurationMs(opts.retryCap, '--retry-cap'),
      };
      if (backoff.baseMs <= 0 || backoff.capMs < backoff.baseMs) {
        throw new EgressguardError(
          'usage',
          `Cannot use --retry-base "${opts.retryBase}" with --retry-cap "${opts.retryCap}"`,
          { hint: 'the base must be above 0 and at most the cap' },
        );
      }
      requireNamespace(opts.netns);
      const target = createHostTarget({
        netns: opts.netns,
        stateDir: opts.stateDir,
        options: backendOptionsOf(opts),
      });
      let engine: HostEngine;
      let enrollName = opts.hostname;
      if (opts.engine === 'firewall') {
        engine = createFirewallEngine({
          target,
          ...(opts.hostname === undefined ? {} : { hostname: opts.hostname }),
          ...(opts.facts === undefined ? {} : { factsFile: opts.facts }),
        });
      } else {
        const facts =
          opts.facts === undefined ? await gatherFacts(target.runner) : readHostFacts(opts.facts);
        enrollName ??= facts.hostname === '' ? undefined : facts.hostname;
        engine = createRecordingEngine({ facts, hashBundle: createBundleHasher() });
      }
      const metrics = createAgentMetrics();
      const metricsServer =
        opts.metricsListen === undefined
          ? undefined
          : createServer((request, response) => {
              void metrics.registry.metrics().then((body) => {
                response.writeHead(request.url === '/metrics' ? 200 : 404, {
                  'content-type': metrics.registry.contentType,
                });
                response.end(request.url === '/metrics' ? body : '');
              });
            });
      if (metricsServer !== undefined && opts.metricsListen !== undefined) {
        const { host, port } = parseListen(opts.metricsListen);
        await new Promise<void>((resolve) => metricsServer.listen(port, host, resolve));
      }
      const controller = new AbortController();
      const stop = (): void => {
        controller.abort();
      };
      process.on('SIGINT', stop);
      process.on('SIGTERM', stop);
      try {
        const end = await runAgent({
          serverUrl: opts.server,
          tokenFile: opts.tokenFile,
          stateDir: target.state,
          engine,
          hostname: enrollName ?? hostname(),
          agentVersion: VERSION,
          signal: controller.signal,
          backoff,
          startJitterMs: parseDurationMs(opts.startJitter, '--start-jitter'),
          metrics,
          log: (line) => ctx.output.err.write(`${new Date().toISOString()} ${line}\n`),
        });
        // Stopped by a signal, or decommissioned by the controller: a clean end. A revoked
        // credential is a failure (the unit does not restart it: it would be refused again).
        ctx.setExit(end === 'revoked' ? EXIT.failed : EXIT.ok);
      } finally {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
        metricsServer?.close();
      }
    });
}

/** `--print-unit`: the service that runs this agent, with the options given on this command line. */
function printUnit(ctx: CommandContext, command: Command, opts: AgentCommandOptions): void {
  const kind = opts.printUnit as AgentUnitKind;
  if (!AGENT_UNIT_KINDS.includes(kind)) {
    throw new EgressguardError('usage', `Cannot use --print-unit "${String(opts.printUnit)}"`, {
      hint: `use one of: ${AGENT_UNIT_KINDS.join(', ')}`,
    });
  }
  const stateDir = resolve(
    opts.stateDir ?? process.env['EGRESSGUARD_STATE_DIR'] ?? '/var/lib/egressguard',
  );
  // Only what was given: the service then follows the defaults of the agent it runs.
  const args: string[] = [];
  for (const option of command.options) {
    const key = option.attributeName();
    if (key === 'printUnit' || command.getOptionValueSource(key) !== 'cli') continue;
    const value = opts[key];
    if (typeof value !== 'string') continue;
    const absolute = key === 'tokenFile' || key === 'facts' ? resolve(value) : value;
    args.push(option.long ?? '', key === 'stateDir' ? stateDir : absolute);
  }
  if (!args.includes('--state-dir')) args.push('--state-dir', stateDir);
  const unit = renderAgentUnit(kind, {
    node: process.execPath,
    bin: packagePath('bin', 'egressguard.js'),
    args,
    stateDir,
  });
  ctx.output.out.write(unit.content);
  ctx.setExit(EXIT.ok);
}
