import { createServer } from 'node:http';
import { hostname } from 'node:os';
import type { Command } from 'commander';
import { createAgentMetrics, createRecordingEngine, runAgent } from '../../agent/index.js';
import { EgressguardError } from '../../core/index.js';
import { gatherFacts, readHostFacts } from '../../facts/index.js';
import { hashPolicyBundle } from '../../fleet/index.js';
import { createRunner } from '../../runner/index.js';
import { parseListen } from '../../server/index.js';
import { StateDir } from '../../state/index.js';
import type { CommandContext } from '../command-context.js';
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
}

/** Registers `agent`. */
export function registerAgent(program: Command, ctx: CommandContext): void {
  program
    .command('agent')
    .description(
      'Run a fleet agent: enroll once, long-poll for this host’s bundle, apply it, report',
    )
    .requiredOption('--server <url>', 'the controller, https://HOST:PORT')
    .requiredOption('--token-file <file>', 'the bootstrap token (read once, at enrollment)')
    .option('--state-dir <dir>', 'where the credential and the pinned CA are kept')
    .option('--netns <name>', 'the network namespace this agent manages')
    .option(
      '--engine <name>',
      'how bundles reach the host: firewall, or recording (records them, changes nothing)',
      'firewall',
    )
    .option('--facts <file>', 'host facts instead of reading the live host')
    .option('--hostname <name>', 'the name to enroll under (default: this machine’s)')
    .option('--metrics-listen <addr>', 'serve Prometheus metrics on HOST:PORT')
    .addHelpText(
      'after',
      `
Examples:
  egressguard agent --server https://controller:8443 --token-file /etc/egressguard/bootstrap.token
  egressguard agent --server https://127.0.0.1:8443 --token-file t --engine recording --facts facts.json

The agent pins the controller's CA from the bootstrap token and refuses a controller whose
certificate does not chain to it. Its credential is stored (0600) in the state directory.
Stops on SIGINT or SIGTERM; a decommissioned host's agent stops by itself.`,
    )
    .action(async (opts: AgentCommandOptions) => {
      if (opts.engine !== 'recording') {
        throw new EgressguardError(
          'unsupported',
          `Cannot run the agent with engine "${opts.engine}": only "recording" is available in this build`,
          {
            hint: 'the firewall engine arrives with the fleet’s phase B; --engine recording runs the protocol without touching the host',
          },
        );
      }
      const runner = createRunner({ netns: opts.netns });
      const facts =
        opts.facts === undefined ? await gatherFacts(runner) : readHostFacts(opts.facts);
      const engine = createRecordingEngine({ facts, hashBundle: hashPolicyBundle });
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
        await runAgent({
          serverUrl: opts.server,
          tokenFile: opts.tokenFile,
          stateDir: new StateDir({ root: opts.stateDir, netns: opts.netns }),
          engine,
          hostname: opts.hostname ?? (facts.hostname === '' ? hostname() : facts.hostname),
          agentVersion: VERSION,
          signal: controller.signal,
          metrics,
          log: (line) => ctx.output.err.write(`${new Date().toISOString()} ${line}\n`),
        });
        // Stopped by a signal, or decommissioned by the controller: both are a clean end.
        ctx.setExit(EXIT.ok);
      } finally {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
        metricsServer?.close();
      }
    });
}
