import { createHash } from 'node:crypto';
import { applyGeneration, FILES, readGeneration, readStatus, runResident } from '../apply/index.js';
import type { BackendOptions } from '../backends/index.js';
import { gatherFacts, readHostFacts, readHostLabels, type HostFacts } from '../facts/index.js';
import { BUNDLE_FORMAT, compileBundle, type CompiledBundle } from '../fleet/index.js';
import { backendOf, boundTunnels, type HostTarget } from '../host/index.js';
import type {
  ApplyOutcome,
  HostEngine,
  LiveStatus,
  PrepareOutcome,
  PreparedGeneration,
} from './host-engine.js';

export interface FirewallGeneration extends PreparedGeneration {
  readonly compiled: CompiledBundle;
}

export interface FirewallEngineOptions {
  /** The host or namespace (`--netns`) the agent enforces on; its options are the agent's own. */
  readonly target: HostTarget;
  /** The name the host enrolled under; facts carry it (a namespace shares the machine's). */
  readonly hostname?: string;
  /**
   * Facts from this file, read again every round, instead of the live host's: a host whose facts
   * this build cannot read itself (macOS; a firewall model in tests).
   */
  readonly factsFile?: string;
  /** Host labels (default: the labels file); they go into the facts classes are bound by. */
  readonly labels?: () => Readonly<Record<string, string>>;
  /** How long an apply waits for the host lock a resident repair holds. */
  readonly lockWaitMs?: number;
  /** The watchers' periodic check, for what the monitors miss (default 10 s, as `run`). */
  readonly watchTickMs?: number;
}

/**
 * The agent's engine for a real host: facts read live (in its namespace, if any), the bundle's IR
 * bound to them and compiled by this host's own backend, applied through the safe-apply contract
 * (host lock, atomic load, read-back), live state read back by the backend's inspector. It writes
 * only what the agent itself owns: a bundle whose options would move the backend's scope (another
 * table or anchor than the agent's own) is refused, whatever the controller says.
 */
export function createFirewallEngine(
  options: FirewallEngineOptions,
): HostEngine<FirewallGeneration> {
  const { target } = options;
  const labels = options.labels ?? readHostLabels;
  const readFacts = async (): Promise<HostFacts> => {
    const facts =
      options.factsFile === undefined
        ? await gatherFacts(target.runner, { labels: labels(), tools: false })
        : readHostFacts(options.factsFile);
    return options.hostname === undefined ? facts : { ...facts, hostname: options.hostname };
  };
  return {
    readFacts,

    prepare(bundle, facts): Promise<PrepareOutcome<FirewallGeneration>> {
      if (bundle.format !== BUNDLE_FORMAT) {
        return Promise.resolve({
          ok: false,
          message: `this agent applies ${BUNDLE_FORMAT} bundles; the controller sent ${bundle.format} (a controller set up for the recording engine)`,
        });
      }
      // The agent's own options (its scope, its tools) under what the push sets; the push may not
      // move the scope.
      const effective: Record<string, string> = {};
      for (const [key, value] of Object.entries({ ...target.options, ...bundle.options })) {
        if (value !== undefined) effective[key] = value;
      }
      const refused = checkPushedOptions(target, facts, { pushed: bundle.options, effective });
      if (refused !== undefined) return Promise.resolve({ ok: false, message: refused });
      // The labels the controller holds for this host (its bootstrap token's) choose its classes.
      const labels = bundle.labels === undefined ? {} : { labels: bundle.labels };
      const result = compileBundle({ ir: bundle.ir, options: effective, ...labels }, facts, {
        registry: target.registry,
      });
      if (!result.ok) return Promise.resolve(result);
      return Promise.resolve({
        ok: true,
        prepared: { hash: result.compiled.hash, compiled: result.compiled },
      });
    },

    async apply(prepared): Promise<ApplyOutcome> {
      const { compiled } = prepared;
      try {
        const report = await applyGeneration({
          backend: compiled.backend,
          runner: target.runner,
          state: target.state,
          options: compiled.options,
          policy: compiled.policyName,
          hash: compiled.hash,
          artifacts: compiled.artifacts,
          // Kept by the generation when a tunnel is found by `match`: a boot restore or a revert
          // then refuses a renumbered utun. Only then, as the inspector reads the host's
          // interfaces for tunnels it is given (ifconfig on macOS).
          ...(Object.keys(compiled.tunnelMatches).length === 0
            ? {}
            : { tunnels: boundTunnels(compiled.ir, compiled.tunnelMatches) }),
          ...(compiled.lockdown === undefined ? {} : { lockdown: compiled.lockdown }),
          lockWaitMs: options.lockWaitMs ?? 30_000,
        });
        return { ok: true, hash: report.generation.hash };
      } catch (error) {
        return { ok: false, message: error instanceof Error ? error.message : String(error) };
      }
    },

    async watch({ signal, onPass, log }): Promise<void> {
      let facts: HostFacts | undefined;
      try {
        facts = await readFacts();
      } catch (error) {
        log(
          `warning: cannot read facts to choose the backend to watch: ${(error as Error).message}`,
        );
      }
      const backend = backendOf(target, facts);
      if (backend.createWatcher === undefined) {
        log(
          `backend "${backend.name}" cannot watch live state: drift is repaired at each round instead`,
        );
        return;
      }
      // The resident mode without a policy of its own: it keeps the last generation the agent
      // applied (the generation files are the agent's) and leaves new ones to the agent's rounds.
      await runResident({
        backend,
        runner: target.runner,
        state: target.state,
        options: appliedOptions(target),
        signal,
        tickMs: options.watchTickMs ?? 10_000,
        // Repairs reach the agent as passes too; every entry goes to its log.
        log: (entry) => {
          log(`watcher ${entry.action}: ${entry.message}`);
        },
        onReconciled: onPass,
      });
    },

    async readStatus(): Promise<LiveStatus> {
      const backend = backendOf(target);
      const status = await readStatus({
        backend,
        runner: target.runner,
        state: target.state,
        // Read back with the options it was applied with (the scope is the agent's own anyway).
        options: appliedOptions(target),
      });
      const { live } = status;
      let hash = live.present ? live.hash : null;
      // The stamp survives an edit of the rules: an edited table, or our routes gone, is drift
      // too, so report a hash that cannot be the applied one.
      if (status.condition === 'Drifted' && hash !== null) {
        hash = createHash('sha256')
          .update(`drifted\n${hash}\n${live.fingerprint ?? ''}\n${status.reasons.join('\n')}`)
          .digest('hex');
      }
      const counters: Record<string, number> = {};
      for (const counter of live.counters) counters[counter.id] = counter.packets;
      return {
        hash,
        counters,
        tunnels: live.tunnels.map((t) => ({ name: t.name, up: t.state === 'up' })),
      };
    },
  };
}

function appliedOptions(target: HostTarget): BackendOptions {
  try {
    return readGeneration(target.state, FILES.applied)?.options ?? target.options;
  } catch {
    return target.options; // corrupt state: readStatus reports it
  }
}

/**
 * Refuses what a push may not choose: an option only the host sets (a tool root runs, a file root
 * writes), and options that move what the backend owns on this host (the agent writes its own
 * table or anchor: its `--table`, `--anchor`, or the default, never one a controller names).
 */
function checkPushedOptions(
  target: HostTarget,
  facts: HostFacts,
  options: { readonly pushed: BackendOptions; readonly effective: BackendOptions },
): string | undefined {
  try {
    const backend = backendOf(target, facts);
    const hostOnly = backend.options
      .filter((o) => o.hostOnly === true && options.pushed[o.key] !== undefined)
      .map((o) => `"${o.key}" (${o.flag.split(' ')[0] ?? o.key})`);
    if (hostOnly.length > 0) {
      return `Cannot apply a bundle that sets ${hostOnly.join(', ')}: only the host sets ${hostOnly.length === 1 ? 'it' : 'them'} (a tool root runs, a file root writes); start the agent with the flag instead, and push without it`;
    }
    const own = backend.describeScope(target.options);
    const wanted = backend.describeScope(options.effective);
    if (own !== wanted) {
      return `Cannot apply a bundle that writes ${wanted}: this agent owns ${own} and writes nothing else (start the agent with that scope, or push without the option)`;
    }
    return undefined;
  } catch (error) {
    return `Cannot apply the bundle's backend options: ${(error as Error).message}`;
  }
}
