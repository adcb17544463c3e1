import { availableParallelism } from 'node:os';
import { createStepTimer, EgressguardError, type StepTimer } from '../../core/index.js';
import { assertNever } from '../../ir/index.js';
import type { Runner } from '../../runner/index.js';
import type {
  Applier,
  Artifact,
  Backend,
  BackendContext,
  Inspector,
  LiveState,
} from '../backend.js';
import { LOCKDOWN_ARTIFACT, RULESET_ARTIFACT, createNftCompiler } from './nft-compiler.js';
import { classifyNftCommand, readNftVersions } from './nft-command.js';
import { nftDoctor } from './nft-doctor-support.js';
import { nftDrops } from './nft-drops.js';
import { NFT_OPTIONS, parseNftOptions } from './nft-options.js';
import { nftProve } from './nft-prove.js';
import { renderUnits } from './systemd-units.js';
import {
  BROKEN_RULESET_FAULT,
  breakRuleset,
  checkRuleset,
  deleteTable,
  loadRuleset,
  loadTable,
  planLoad,
  type SetChange,
} from './nft-applier.js';
import {
  listLiveTable,
  readLiveTable,
  WHOLE_LISTING_MAX_ELEMENTS,
  type LiveTable,
} from './nft-inspector.js';
import {
  DISABLE_KILL_SWITCH_FAULT,
  disableKillSwitch,
  LOSE_RULES_FAULT,
} from './nft-test-faults.js';
import { CLASS_SET_COMMENT, definitionBlocks, elementCount } from './nft-sets.js';
import { createNftWatcher } from './nft-watcher.js';
import { diffRulesets } from './nft-plan-diff.js';
import { describeFirewallDiff } from '../firewall-diff.js';
import { STEERING_ARTIFACT, STEERING_DEFAULTS, type SteeringSpec } from './steering.js';
import {
  applySteeringDiff,
  describeDiff,
  describeRoute,
  describeRule,
  diffSteering,
  readLiveSteering,
  type IpLink,
  removeSteering,
} from './steering-applier.js';

/** Linux: one owned nftables table plus policy routing for tunnel classes. */
export const nftablesBackend: Backend = {
  name: 'nftables',
  layer: 'nftables',
  capabilities: {
    runsHere: true,
  },
  options: NFT_OPTIONS,
  artifactRoles: {
    [RULESET_ARTIFACT]: 'firewall',
    [STEERING_ARTIFACT]: 'routing',
    [LOCKDOWN_ARTIFACT]: 'lockdown',
  },
  describeScope(options) {
    return `table inet ${parseNftOptions(options).table}`;
  },
  classifyCommand: classifyNftCommand,
  readVersions: readNftVersions,
  createCompiler: createNftCompiler,
  createApplier: (context) => createNftApplier(context),
  createInspector: (context) => createNftInspector(context),
  createWatcher: (context) => createNftWatcher(context.runner),
  doctor: nftDoctor,
  drops: nftDrops,
  units: { description: 'systemd units', render: renderUnits },
  prove: nftProve,
};

function artifact(artifacts: readonly Artifact[], name: string): string {
  const found = artifacts.find((a) => a.name === name);
  if (found === undefined) {
    throw new EgressguardError('state-corrupt', `Cannot find artifact "${name}" for nftables`);
  }
  return found.content;
}

/** The class sets (CLASS_SET_COMMENT) a compiled ruleset defines, by name. */
function classSetsOf(artifacts: readonly Artifact[], table: string): string[] {
  return definitionBlocks(artifact(artifacts, RULESET_ARTIFACT), table)
    .filter(
      (b) =>
        b.kind === 'set' &&
        CLASS_SET_COMMENT.test(/\n\t\tcomment "([^"]*)"/.exec(b.text)?.[1] ?? ''),
    )
    .map((b) => b.name);
}

/** Whether a compiled ruleset's sets are small enough to list whole (WHOLE_LISTING_MAX_ELEMENTS). */
function isSmall(artifacts: readonly Artifact[], table: string): boolean {
  let total = 0;
  for (const block of definitionBlocks(artifact(artifacts, RULESET_ARTIFACT), table)) {
    if (block.kind === 'set') total += elementCount(block);
    if (total > WHOLE_LISTING_MAX_ELEMENTS) return false;
  }
  return true;
}

function steeringOf(artifacts: readonly Artifact[]): SteeringSpec {
  return JSON.parse(artifact(artifacts, STEERING_ARTIFACT)) as SteeringSpec;
}

/** The tables and priorities we look at: the desired ones, or the defaults when removing. */
function steeringScope(spec: SteeringSpec | undefined): Pick<SteeringSpec, 'protocol' | 'tunnels'> {
  if (spec !== undefined && spec.tunnels.length > 0) return spec;
  return {
    protocol: spec?.protocol ?? STEERING_DEFAULTS.protocol,
    tunnels: [{ name: '', table: STEERING_DEFAULTS.table, priority: STEERING_DEFAULTS.priority }],
  };
}

function createNftApplier(context: BackendContext): Applier {
  const { runner } = context;
  const { table } = parseNftOptions(context.options);
  return {
    async plan(artifacts, planOptions = {}) {
      const ruleset = artifact(artifacts, RULESET_ARTIFACT);
      const spec = steeringOf(artifacts);
      const problems: string[] = [];
      const complaint = await checkRuleset(runner, ruleset);
      if (complaint !== null) problems.push(`nft rejects the ruleset: ${complaint}`);
      const live = await readLiveTable(runner, table);
      const liveSteering = await readLiveSteering(runner, steeringScope(spec));
      problems.push(...liveSteering.collisions);
      const changes: string[] = [];
      const wanted = stampOf(ruleset);
      if (!live.present) changes.push(`+ table inet ${table}`);
      else if (live.hash !== wanted)
        changes.push(`~ table inet ${table} (hash ${short(live.hash)} → ${short(wanted)})`);
      // What is live rule by rule: nothing, or the recorded generation when the live stamp is its.
      const applied =
        planOptions.applied === undefined
          ? undefined
          : artifact(planOptions.applied, RULESET_ARTIFACT);
      const before = !live.present
        ? { ruleset: undefined }
        : applied !== undefined && stampOf(applied) === live.hash
          ? { ruleset: applied }
          : undefined;
      const firewall =
        before === undefined || live.hash === wanted
          ? undefined
          : diffRulesets(before.ruleset, ruleset, table);
      if (firewall !== undefined) {
        changes.push(...describeFirewallDiff(firewall));
      } else {
        // A refill writes a set's own elements again (the class sets, at every apply): no change.
        for (const set of planLoad(ruleset, table, live.objects).sets) {
          if (set.action !== 'refill') changes.push(describeSetChange(set, table));
        }
      }
      changes.push(...describeDiff(diffSteering(spec, liveSteering)));
      return { changes, problems, ...(firewall === undefined ? {} : { firewall }) };
    },

    async apply(artifacts, options) {
      const ruleset = runner.faults.isOn(DISABLE_KILL_SWITCH_FAULT)
        ? disableKillSwitch(artifact(artifacts, RULESET_ARTIFACT))
        : artifact(artifacts, RULESET_ARTIFACT);
      const spec = steeringOf(artifacts);
      const timer = options.timer ?? createStepTimer();
      const [liveSteering, live] = await timer.time('read live', () =>
        Promise.all([readLiveSteering(runner, steeringScope(spec)), listLiveTable(runner, table)]),
      );
      if (liveSteering.collisions.length > 0) {
        throw new EgressguardError(
          'apply-failed',
          `Cannot apply: routing state we do not own is in the way: ${liveSteering.collisions.join('; ')}`,
          {
            hint: 'run `egressguard doctor`; move the other rule or route, or choose our routing table and rule priority (--route-table, --rule-priority)',
          },
        );
      }
      if (options.routingOnly !== true) {
        // The table first: its kill switch covers every intermediate routing state.
        await loadCompiled(runner, table, ruleset, live, {
          force: options.force === true,
          beforeSwap: () => runner.faults.hit('before-nft-commit'),
          broken: runner.faults.isOn(BROKEN_RULESET_FAULT),
          timer,
        });
      }
      try {
        // Anything that fails from here on is after the commit: roll the table back.
        if (options.routingOnly !== true) await runner.faults.hit('after-nft-commit');
        await runner.faults.hit('steering');
        const outcome = await timer.time('routing', () =>
          applySteeringDiff(runner, diffSteering(spec, liveSteering), spec.protocol),
        );
        if (runner.faults.isOn(LOSE_RULES_FAULT)) {
          const now = await readLiveSteering(runner, steeringScope(spec));
          await removeSteering(runner, { ...now, ownedRoutes: [] }, spec.protocol);
        }
        await runner.faults.hit('after-routes');
        return {
          deferred: outcome.deferred.map((r) => ({
            what: `route ${r.destination} dev ${r.device ?? '?'} table ${r.table}`,
            waitingFor: r.device ?? null,
          })),
        };
      } catch (error) {
        if (options.previous !== undefined) {
          const now = await listLiveTable(runner, table);
          await loadCompiled(runner, table, artifact(options.previous, RULESET_ARTIFACT), now, {
            force: false,
          });
        }
        throw new EgressguardError(
          'partially-applied',
          `Cannot finish the apply: the routing step failed after the nft commit${options.previous === undefined ? '' : ', so the previous table was re-applied'}: ${(error as Error).message}`,
          {
            cause: error,
            hint: 'fix the cause and apply again; `status` shows PartiallyApplied until then',
          },
        );
      }
    },

    async lockdown(content) {
      await loadRuleset(runner, content);
    },

    async remove() {
      const removed: string[] = [];
      const liveSteering = await readLiveSteering(runner, steeringScope(undefined));
      // Routing first: with the table still there, nothing leaks while the rules go.
      await removeSteering(runner, liveSteering, STEERING_DEFAULTS.protocol);
      removed.push(
        ...liveSteering.ownedRules.map((r) => `ip rule from ${r.from} lookup ${r.table}`),
      );
      removed.push(
        ...liveSteering.ownedRoutes.map(
          (r) => `ip route ${r.type} ${r.destination} table ${r.table}`,
        ),
      );
      if (await deleteTable(runner, table)) removed.push(`table inet ${table}`);
      return { removed };
    },
  };
}

/**
 * Loads a compiled ruleset onto the live table: new sets staged in parallel (one nft process per
 * core at most), then one swap transaction. With `broken` (a test fault) the swap is one the
 * kernel rejects at commit.
 */
async function loadCompiled(
  runner: Runner,
  table: string,
  ruleset: string,
  live: Pick<LiveTable, 'present' | 'objects'>,
  options: {
    force: boolean;
    beforeSwap?: () => Promise<void>;
    broken?: boolean;
    timer?: StepTimer;
  },
): Promise<void> {
  const plan = planLoad(ruleset, table, live.objects, {
    force: options.force,
    parallel: availableParallelism(),
  });
  await loadTable(
    runner,
    table,
    options.broken === true ? { ...plan, swap: breakRuleset(plan.swap, table) } : plan,
    {
      tableWasAbsent: !live.present,
      ...(options.beforeSwap === undefined ? {} : { beforeSwap: options.beforeSwap }),
      ...(options.timer === undefined ? {} : { timer: options.timer }),
    },
  );
}

function createNftInspector(context: BackendContext): Inspector {
  const { runner } = context;
  const { table } = parseNftOptions(context.options);
  return {
    async read(expected): Promise<LiveState> {
      const spec = expected === undefined ? undefined : steeringOf(expected);
      const names = [...new Set(spec?.tunnels.map((t) => t.name) ?? [])];
      const [live, liveSteering] = await Promise.all([
        readLiveTable(
          runner,
          table,
          expected === undefined
            ? {}
            : { expectedClassSets: classSetsOf(expected, table), whole: isSmall(expected, table) },
        ),
        readLiveSteering(runner, steeringScope(spec), { withLinks: names.length > 0 }),
      ]);
      const tunnels = tunnelStates(names, liveSteering.links ?? []);
      const diff = spec === undefined ? undefined : diffSteering(spec, liveSteering);
      const down = new Set(tunnels.filter((t) => t.state !== 'up').map((t) => t.name));
      const tunnelNames = new Set(tunnels.map((t) => t.name));
      return {
        present: live.present,
        hash: live.hash,
        fingerprint: live.fingerprint,
        counters: [...live.counters.values()].map((c) => ({
          id: c.id,
          packets: c.packets,
          bytes: c.bytes,
        })),
        // A tunnel route that vanished with its link is expected until the watcher re-adds it.
        missing:
          diff === undefined
            ? []
            : [
                ...diff.addRules.map((r) => ({ what: describeRule(r), waitingFor: null })),
                ...diff.addRoutes.map((r) => ({
                  what: describeRoute(r),
                  waitingFor: r.device !== undefined && down.has(r.device) ? r.device : null,
                  ...(r.device !== undefined && tunnelNames.has(r.device)
                    ? { through: r.device }
                    : {}),
                })),
              ],
        unexpected:
          diff === undefined
            ? []
            : [
                ...diff.deleteRules.map((r) => ({ what: describeRule(r), waitingFor: null })),
                ...diff.deleteRoutes.map((r) => ({ what: describeRoute(r), waitingFor: null })),
              ],
        collisions: liveSteering.collisions,
        tunnels,
      };
    },
  };
}

/** Each tunnel's state from the link listing: up only with carrier. */
function tunnelStates(names: readonly string[], links: readonly IpLink[]): LiveState['tunnels'] {
  return names.map((name) => {
    const link = links.find((l) => l.ifname === name);
    if (link === undefined) return { name, state: 'absent' as const };
    const up = (link.flags ?? []).includes('UP') && !(link.flags ?? []).includes('NO-CARRIER');
    return { name, state: up ? ('up' as const) : ('down' as const) };
  });
}

function describeSetChange(set: SetChange, table: string): string {
  const what = `set inet ${table} ${set.name}`;
  const count = `${set.elements.toLocaleString('en-US')} element${set.elements === 1 ? '' : 's'}`;
  switch (set.action) {
    case 'stage':
      return `+ ${what} (${count}, loaded before the swap)`;
    case 'delete':
      return `- ${what}`;
    case 'refill':
      return `~ ${what} (${count}, refilled)`;
    case 'recreate':
      return `~ ${what} (${count}; the live one is of another type: recreated)`;
    default:
      return assertNever(set.action);
  }
}

/** The host config hash a compiled ruleset is stamped with. */
function stampOf(ruleset: string): string | null {
  return /eg-hash:([0-9a-f]{64})/.exec(ruleset)?.[1] ?? null;
}

function short(hash: string | null): string {
  return hash === null ? 'none' : hash.slice(0, 12);
}
