import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { Command } from 'commander';
import { runResident, startGatewayLoop, type GatewayLoop } from '../../apply/index.js';
import { registry, type ClusterConnection, type ClusterDuty } from '../../backends/index.js';
import { EgressguardError } from '../../core/index.js';
import {
  applyPrepared,
  hostContext,
  preparePolicy,
  type HostTarget,
  type Prepared,
} from '../../host/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import { checkMissingIngress } from '../missing-ingress.js';
import { printLine } from '../output.js';
import { addTargetOptions, targetOf, warn, type TargetOptions } from '../target-options.js';

/** Registers `run`. */
export function registerRun(program: Command, ctx: CommandContext): void {
  addTargetOptions(
    program
      .command('run')
      .description(
        'Apply, then stay resident: re-add routes when a tunnel returns, repair a deleted or edited table',
      )
      .argument('<policy>', 'policy file (YAML)')
      .option('--facts <file>', 'host facts instead of reading the live host')
      .option('--tick <ms>', 'periodic check interval in milliseconds', '10000')
      .option('--json', 'log JSON lines')
      .option(
        '--k8s',
        'on a Kubernetes gateway node: keep the egress gateway label on this node only while its tunnel is up',
      )
      .option(
        '--kubeconfig <file>',
        'with --k8s: credentials file (default: the pod service account)',
      )
      .option(
        '--node <name>',
        "with --k8s: this node's name in the cluster (default: $NODE_NAME, the host name)",
      )
      .option('--gateway-tick <ms>', 'with --k8s: periodic label check in milliseconds', '1000')
      .option(
        '--metrics-listen <addr>',
        'with --k8s: serve Prometheus metrics on HOST:PORT (/metrics)',
      ),
  )
    .addHelpText(
      'after',
      '\nStops on SIGINT or SIGTERM. Rules and routes stay in place when it stops. With --netns, it\nstops with an error (exit 2) at its next check once that namespace is deleted.',
    )
    .action(
      async (
        file: string,
        opts: TargetOptions & {
          facts?: string;
          tick: string;
          json?: boolean;
        } & ClusterOptions,
      ) => {
        const tickMs = parseTick(opts.tick, '--tick', 10_000);
        const cluster = clusterOptionsOf(opts);
        const target = targetOf(opts);
        const prepared = await preparePolicy(target, { policy: file, facts: opts.facts, warn });
        // Resident at boot, it may start before the bridge its workloads use: warn, never refuse.
        checkMissingIngress(prepared, { allowed: true, warn });
        // The cluster is reached before anything is applied: bad credentials change nothing.
        const connected =
          cluster === undefined ? undefined : await connectGateway(cluster, prepared);
        let report;
        try {
          report = await applyPrepared(target, prepared);
        } catch (error) {
          await connected?.connection.close();
          throw error;
        }
        const emit = (entry: { time: string; action: string; message: string }): void => {
          printLine(
            ctx.output,
            opts.json === true
              ? JSON.stringify(entry)
              : `${entry.time} ${entry.action}: ${entry.message}`,
          );
        };
        emit({
          time: new Date().toISOString(),
          action: report.changed ? 'applied' : 'unchanged',
          message: `generation ${report.generation.number}, hash ${report.generation.hash.slice(0, 12)}`,
        });
        const controller = new AbortController();
        const stop = (): void => {
          controller.abort();
        };
        // `on`, not `once`: execa's signal-exit re-raises a signal when no other listener is left
        // at the time it runs, and a `once` listener that already ran counts as none.
        process.on('SIGINT', stop);
        process.on('SIGTERM', stop);
        // The facts last bound: a tunnel deleted since is bound as it was (keepAbsentTunnels).
        let bound = prepared.facts;
        const gateway =
          connected === undefined
            ? undefined
            : await startGateway({ ...connected, target, prepared, emit });
        try {
          await runResident({
            ...(gateway === undefined ? {} : { onChange: gateway.loop.nudge }),
            ...hostContext(target, prepared.backend),
            log: emit,
            signal: controller.signal,
            tickMs,
            // The policy file and the host's facts are read again at every reconcile: an uplink
            // that changed moves the hash, and the new generation is applied.
            ownHash: prepared.hash,
            refresh: async () => {
              const fresh = await preparePolicy(target, {
                policy: file,
                facts: opts.facts,
                previous: bound,
              });
              bound = fresh.facts;
              return {
                hash: fresh.hash,
                apply: async () => {
                  const now = await applyPrepared(target, fresh);
                  return {
                    changed: now.changed,
                    generation: now.generation.number,
                    hash: now.generation.hash,
                  };
                },
              };
            },
          });
        } finally {
          process.off('SIGINT', stop);
          process.off('SIGTERM', stop);
          await gateway?.stop();
        }
        ctx.setExit(EXIT.ok);
      },
    );
}

/** A periodic check interval: at least 100 ms, or `run` would spin on its listings. */
function parseTick(text: string, flag: string, fallback: number): number {
  const ms = Number(text);
  if (!/^\d+$/.test(text) || ms < 100) {
    throw new EgressguardError('usage', `Cannot use ${flag} "${text}"`, {
      hint: `give the interval in milliseconds, at least 100 (default ${fallback})`,
    });
  }
  return ms;
}

interface ClusterOptions {
  readonly k8s?: boolean;
  readonly kubeconfig?: string;
  readonly node?: string;
  readonly gatewayTick: string;
  readonly metricsListen?: string;
}

/** The --k8s options, checked before anything is applied; undefined without --k8s. */
function clusterOptionsOf(opts: ClusterOptions):
  | {
      readonly credentials: string | undefined;
      readonly node: string | undefined;
      readonly tickMs: number;
      readonly listen: { readonly host: string; readonly port: number } | undefined;
    }
  | undefined {
  if (opts.k8s !== true) {
    for (const [flag, value] of [
      ['--kubeconfig', opts.kubeconfig],
      ['--node', opts.node],
      ['--metrics-listen', opts.metricsListen],
    ] as const) {
      if (value !== undefined) {
        throw new EgressguardError('usage', `Cannot use ${flag} without --k8s`, {
          hint: 'add --k8s on a Kubernetes gateway node, or drop the option',
        });
      }
    }
    return undefined;
  }
  if (opts.kubeconfig !== undefined && !existsSync(opts.kubeconfig)) {
    throw new EgressguardError(
      'usage',
      `Cannot read --kubeconfig "${opts.kubeconfig}": no such file`,
      {
        hint: 'give the path of a kubeconfig file, or leave it out inside a pod',
      },
    );
  }
  return {
    credentials: opts.kubeconfig,
    node: opts.node,
    tickMs: parseTick(opts.gatewayTick, '--gateway-tick', 1000),
    listen: opts.metricsListen === undefined ? undefined : parseListen(opts.metricsListen),
  };
}

/** HOST:PORT or [IPv6]:PORT. */
function parseListen(text: string): { host: string; port: number } {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(text);
  const port = Number(match?.[3]);
  const host = match?.[1] ?? match?.[2];
  if (host === undefined || !(port >= 0 && port <= 65_535)) {
    throw new EgressguardError('usage', `Cannot use --metrics-listen "${text}"`, {
      hint: 'give HOST:PORT, e.g. 0.0.0.0:9641 or [::1]:9641',
    });
  }
  return { host, port };
}

/** The cluster side of `run --k8s`: its duties for the policy, and a connection for them. */
async function connectGateway(
  cluster: NonNullable<ReturnType<typeof clusterOptionsOf>>,
  prepared: Prepared,
): Promise<{
  readonly connection: ClusterConnection;
  readonly duties: readonly ClusterDuty[];
  readonly tickMs: number;
  readonly listen: { readonly host: string; readonly port: number } | undefined;
}> {
  const support = registry.cluster();
  const duties = support.duties(prepared.independent);
  if (duties.length === 0) {
    throw new EgressguardError(
      'usage',
      `Cannot run --k8s with policy "${prepared.policy.name}": it has no tunnel class with a kill switch`,
      {
        hint: 'the gateway node keeps a label per tunnel class; give the policy the gateway enforces',
      },
    );
  }
  const connection = await support.connect({
    credentials: cluster.credentials,
    node: cluster.node,
    facts: prepared.facts,
  });
  return { connection, duties, tickMs: cluster.tickMs, listen: cluster.listen };
}

/** Serves metrics and starts the gateway loop beside the resident. */
async function startGateway(input: {
  readonly connection: ClusterConnection;
  readonly duties: readonly ClusterDuty[];
  readonly tickMs: number;
  readonly listen: { readonly host: string; readonly port: number } | undefined;
  readonly target: HostTarget;
  readonly prepared: Prepared;
  readonly emit: (entry: { time: string; action: string; message: string }) => void;
}): Promise<{ readonly loop: GatewayLoop; stop(): Promise<void> }> {
  const { connection, duties } = input;
  let server: Server | undefined;
  try {
    if (input.listen !== undefined) server = await serveMetrics(connection, input.listen);
  } catch (error) {
    await connection.close();
    throw error;
  }
  const address = server?.address();
  input.emit({
    time: new Date().toISOString(),
    action: 'watching',
    message: `node ${connection.node} on ${connection.server}: ${duties.map((d) => `${d.what} while ${d.tunnel} is up`).join('; ')}${typeof address === 'object' && address !== null ? `; metrics on http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}/metrics` : ''}`,
  });
  const loop = startGatewayLoop({
    ...hostContext(input.target, input.prepared.backend),
    connection,
    duties,
    log: input.emit,
    tickMs: input.tickMs,
  });
  return {
    loop,
    async stop() {
      await loop.stop({ unmark: true });
      server?.closeAllConnections();
      await new Promise<void>((resolve) => {
        if (server === undefined) resolve();
        else
          server.close(() => {
            resolve();
          });
      });
      await connection.close();
    },
  };
}

function serveMetrics(
  connection: ClusterConnection,
  listen: { readonly host: string; readonly port: number },
): Promise<Server> {
  const server = createServer((request, response) => {
    if (request.method !== 'GET' || request.url?.split('?')[0] !== '/metrics') {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try /metrics\n');
      return;
    }
    connection.metrics().then(
      ({ contentType, text }) => {
        response.writeHead(200, { 'content-type': contentType }).end(text);
      },
      (error: unknown) => {
        response
          .writeHead(500, { 'content-type': 'text/plain' })
          .end(`${(error as Error).message}\n`);
      },
    );
  });
  return new Promise((resolve, reject) => {
    server.once('error', (error) => {
      reject(
        new EgressguardError(
          'usage',
          `Cannot listen on --metrics-listen "${listen.host}:${listen.port}": ${error.message}`,
          {
            cause: error,
            hint: 'choose a free port and an address of this host',
          },
        ),
      );
    });
    server.listen(listen.port, listen.host, () => {
      resolve(server);
    });
  });
}
