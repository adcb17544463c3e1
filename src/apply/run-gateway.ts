import type {
  Backend,
  BackendOptions,
  ClusterConnection,
  ClusterDuty,
  LiveState,
} from '../backends/index.js';
import type { Runner } from '../runner/index.js';
import type { StateDir } from '../state/index.js';
import { FILES, readGeneration } from './generation.js';
import type { ResidentLogEntry } from './run-resident.js';

/** What the gateway loop last told the cluster for one duty. */
interface DutyState {
  up: boolean | undefined;
}

/** A running gateway loop: nudge it when something may have changed; stop it when done. */
export interface GatewayLoop {
  /**
   * Asks for a pass. A link event that shows a duty's tunnel down or gone takes the duty's mark
   * off at once, before the pass reads the whole live state (the kill switch's fast path). The
   * promise settles when that removal is done (at once for any other nudge), so the caller can
   * hold back work that would compete with it.
   */
  readonly nudge: (
    reason: string,
    link?: { readonly name: string; readonly state: 'up' | 'down' | 'absent' },
  ) => Promise<void>;
  /** Stops the loop; with `unmark`, takes every mark off the node first (fail closed). */
  stop(options: { readonly unmark: boolean }): Promise<void>;
}

/**
 * The cluster side of the resident on a gateway node (`run --k8s`): keeps each duty's mark (the
 * egress gateway label) on the node only while its tunnel is up and routable, as the host's own
 * backend reads it back: the link present, up and with carrier, and every route of the applied
 * generation through it live. A pass runs at every nudge (link and ruleset events, the end of
 * each host reconcile) and `tickMs` after the last; one at a time, a nudge meanwhile asks for one
 * more.
 */
export function startGatewayLoop(input: {
  readonly backend: Backend;
  readonly runner: Runner;
  readonly state: StateDir;
  readonly options: BackendOptions;
  readonly connection: ClusterConnection;
  readonly duties: readonly ClusterDuty[];
  readonly log: (entry: ResidentLogEntry) => void;
  readonly tickMs: number;
}): GatewayLoop {
  const inspector = input.backend.createInspector({
    runner: input.runner,
    options: input.options,
  });
  const states = new Map<string, DutyState>(input.duties.map((d) => [d.id, { up: undefined }]));
  const log = (action: ResidentLogEntry['action'], message: string): void => {
    input.log({ time: new Date().toISOString(), action, message });
  };
  const life = { stopped: false };
  // Link events that showed a duty's tunnel down or gone, and one converge at a time: the fast
  // path of a down event and a pass never write the same mark at once.
  let downEvents = 0;
  let queue: Promise<unknown> = Promise.resolve();
  const serially = <T>(work: () => Promise<T>): Promise<T> => {
    const next = queue.then(work, work);
    queue = next.catch(() => undefined);
    return next;
  };
  const pass: { running: Promise<void> | undefined; again: string | undefined } = {
    running: undefined,
    again: undefined,
  };

  const routable = (live: LiveState, tunnel: string): { up: boolean; why: string } => {
    const link = live.tunnels.find((t) => t.name === tunnel);
    if (link === undefined || link.state === 'absent') {
      return { up: false, why: `tunnel ${tunnel} is absent` };
    }
    if (link.state === 'down')
      return { up: false, why: `tunnel ${tunnel} is down or has no carrier` };
    const missing = live.missing.filter((m) => m.through === tunnel);
    if (missing.length > 0) {
      return {
        up: false,
        why: `tunnel ${tunnel} is up but not routable yet (missing: ${missing.map((m) => m.what).join(', ')})`,
      };
    }
    return { up: true, why: `tunnel ${tunnel} is up and routable` };
  };

  /** Tunnels the applied generation does not steer are read as absent: no route, no gateway. */
  const readLive = async (): Promise<LiveState> => {
    const generation = readGeneration(input.state, FILES.applied);
    return inspector.read(generation?.artifacts);
  };

  const passOnce = async (reason: string): Promise<void> => {
    const epoch = downEvents;
    const live = await readLive();
    for (const duty of input.duties) {
      const { up, why } = routable(live, duty.tunnel);
      const state = states.get(duty.id) ?? { up: undefined };
      states.set(duty.id, state);
      // A tunnel that went down while this pass read live state must not be marked from that
      // older reading; the pass the down event asked for reads again.
      if (up && downEvents !== epoch) continue;
      try {
        const change = await serially(() => input.connection.converge(duty, up));
        const first = state.up === undefined;
        state.up = up;
        if (change.changed || first) {
          log(
            up ? 'marked' : 'unmarked',
            `${duty.what} ${up ? (change.changed ? 'set on' : 'kept on') : change.changed ? 'removed from' : 'kept off'} node ${input.connection.node}: ${why} (${reason})`,
          );
        }
        if (change.reapplied.length > 0) {
          log(
            'reapplied-cluster',
            `re-applied ${change.reapplied.map((n) => `"${n}"`).join(', ')} so the egress IP is selected afresh`,
          );
        }
      } catch (error) {
        // The next nudge or tick tries again; the log says what is at stake meanwhile.
        log(
          'error',
          `Cannot ${up ? 'set' : 'remove'} ${duty.what} on node ${input.connection.node} (${why}): ${(error as Error).message}`,
        );
      }
    }
  };

  const run = (reason: string): void => {
    if (life.stopped) return;
    if (pass.running !== undefined) {
      pass.again = reason;
      return;
    }
    pass.running = (async () => {
      let next: string | undefined = reason;
      while (next !== undefined && !life.stopped) {
        pass.again = undefined;
        try {
          await passOnce(next);
        } catch (error) {
          log('error', `Cannot read the tunnels' state: ${(error as Error).message}`);
        }
        next = pass.again;
      }
    })().finally(() => {
      pass.running = undefined;
      schedule();
    });
  };

  // The periodic check runs `tickMs` after the last pass ended, not on a fixed beat: on a loaded
  // machine a pass can take longer than the beat, and passes back to back would starve the ones
  // a link event asks for.
  let tick: ReturnType<typeof setTimeout> | undefined;
  const schedule = (): void => {
    clearTimeout(tick);
    if (!life.stopped) {
      tick = setTimeout(() => {
        run('periodic check');
      }, input.tickMs);
    }
  };
  run('start');

  /** Unmarks the duties of a tunnel a link event shows down or gone, then asks for a pass. */
  const nudge: GatewayLoop['nudge'] = (reason, link) => {
    const gone = input.duties.filter(
      (d) => link !== undefined && link.state !== 'up' && d.tunnel === link.name,
    );
    if (gone.length === 0 || life.stopped) {
      run(reason);
      return Promise.resolve();
    }
    downEvents++;
    const seen = performance.now();
    return (async () => {
      for (const duty of gone) {
        const state = states.get(duty.id);
        if (state?.up === false) continue;
        try {
          let started = 0;
          const change = await serially(() => {
            started = performance.now();
            return input.connection.converge(duty, false);
          });
          const done = performance.now();
          if (state !== undefined) state.up = false;
          if (change.changed) {
            input.log({
              time: new Date().toISOString(),
              action: 'unmarked',
              message: `${duty.what} removed from node ${input.connection.node}: tunnel ${duty.tunnel} is ${link?.state === 'absent' ? 'absent' : 'down or has no carrier'} (${reason})`,
              steps: {
                wait: Math.round((started - seen) * 10) / 10,
                patch: Math.round((done - started) * 10) / 10,
              },
            });
          }
        } catch (error) {
          log(
            'error',
            `Cannot remove ${duty.what} on node ${input.connection.node}: ${(error as Error).message}`,
          );
        }
      }
    })().finally(() => {
      run(reason);
    });
  };

  return {
    nudge,
    async stop({ unmark }) {
      life.stopped = true;
      clearTimeout(tick);
      await pass.running;
      if (!unmark) return;
      for (const duty of input.duties) {
        try {
          const change = await input.connection.converge(duty, false);
          if (change.changed) {
            log(
              'unmarked',
              `${duty.what} removed from node ${input.connection.node}: the resident stops, and nothing watches the tunnel now`,
            );
          }
        } catch (error) {
          log(
            'error',
            `Cannot remove ${duty.what} from node ${input.connection.node} while stopping: ${(error as Error).message}`,
          );
        }
      }
    },
  };
}
