import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Controller } from '../fleet/index.js';

/** The controller's metrics; fleet gauges are read from the store at scrape time. */
export interface ServerMetrics {
  readonly registry: Registry;
  readonly checkins: Counter;
  readonly driftRepairs: Counter;
  readonly requestDuration: Histogram<'method' | 'route' | 'status'>;
}

export function createServerMetrics(controller: Controller): ServerMetrics {
  const registry = new Registry();
  const registers = [registry];

  const checkins = new Counter({
    name: 'egressguard_fleet_checkins_total',
    help: 'Agent check-ins (bundle polls and status reports) served by this replica',
    registers,
  });
  const driftRepairs = new Counter({
    name: 'egressguard_fleet_drift_repairs_total',
    help: 'Drift repairs agents reported to this replica (a watcher report may stand for several)',
    registers,
  });
  const requestDuration = new Histogram({
    name: 'egressguard_http_request_duration_seconds',
    help: 'HTTP request latency by route (bundle long polls include their wait)',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers,
  });

  const { store } = controller;
  new Gauge({
    name: 'egressguard_fleet_store_state',
    help: 'This replica’s view of its store: 1 for the state it is in (ok, unavailable, disk-full)',
    labelNames: ['state'] as const,
    registers,
    collect() {
      const { state } = store.health();
      for (const s of ['ok', 'unavailable', 'disk-full'] as const)
        this.set({ state: s }, s === state ? 1 : 0);
    },
  });
  new Counter({
    name: 'egressguard_fleet_store_listen_reconnects_total',
    help: 'Times this replica listened again for other replicas’ wake-ups after the connection broke (PostgreSQL)',
    registers,
    collect() {
      this.reset();
      this.inc(store.listenReconnects);
    },
  });

  const hostCounts = new Gauge({
    name: 'egressguard_fleet_hosts',
    help: 'Enrolled hosts by condition and status (Ready is Unknown for a silent host)',
    labelNames: ['condition', 'status'] as const,
    registers,
    collect: () => hostsOnce(),
  });
  const perHost = {
    condition: new Gauge({
      name: 'egressguard_fleet_host_condition',
      help: '1 when the host condition is True',
      labelNames: ['host', 'condition'] as const,
      registers,
      collect: () => hostsOnce(),
    }),
    silent: new Gauge({
      name: 'egressguard_fleet_host_silent',
      help: '1 when the host has not checked in within its grace',
      labelNames: ['host'] as const,
      registers,
      collect: () => hostsOnce(),
    }),
    drift: new Gauge({
      name: 'egressguard_fleet_host_drift',
      help: '1 when the host reports a live hash other than its applied hash',
      labelNames: ['host'] as const,
      registers,
      collect: () => hostsOnce(),
    }),
    checkin: new Gauge({
      name: 'egressguard_fleet_host_last_checkin_timestamp_seconds',
      help: 'When the host last checked in',
      labelNames: ['host'] as const,
      registers,
      collect: () => hostsOnce(),
    }),
  };
  // prom-client collects every metric at once: the gauges of a group share one query per scrape.
  const hostsOnce = shareRun(fillHosts);
  const rolloutsOnce = shareRun(fillRollouts);

  async function fillHosts(): Promise<void> {
    for (const gauge of [hostCounts, ...Object.values(perHost)]) gauge.reset();
    const hosts = await readWhileStoreWorks(() => controller.listHosts());
    for (const host of hosts ?? []) {
      for (const c of host.conditions) hostCounts.inc({ condition: c.type, status: c.status });
      for (const c of host.conditions) {
        perHost.condition.set({ host: host.name, condition: c.type }, c.status === 'True' ? 1 : 0);
      }
      perHost.silent.set({ host: host.name }, host.silent ? 1 : 0);
      const drift =
        host.appliedHash !== null && host.liveHash !== null && host.appliedHash !== host.liveHash;
      perHost.drift.set({ host: host.name }, drift ? 1 : 0);
      if (host.lastCheckinAt !== null)
        perHost.checkin.set({ host: host.name }, host.lastCheckinAt / 1000);
    }
  }

  const rollout = {
    state: new Gauge({
      name: 'egressguard_fleet_rollout_state',
      help: '1 for the state each recent rollout is in',
      labelNames: ['rollout', 'state'] as const,
      registers,
      collect: () => rolloutsOnce(),
    }),
    waves: new Gauge({
      name: 'egressguard_fleet_rollout_waves',
      help: 'Waves of each recent rollout by state',
      labelNames: ['rollout', 'state'] as const,
      registers,
      collect: () => rolloutsOnce(),
    }),
    currentWave: new Gauge({
      name: 'egressguard_fleet_rollout_current_wave',
      help: 'The index of the wave a rollout is on',
      labelNames: ['rollout'] as const,
      registers,
      collect: () => rolloutsOnce(),
    }),
    waveStarted: new Gauge({
      name: 'egressguard_fleet_rollout_wave_started_timestamp_seconds',
      help: 'When the current wave of a rollout started',
      labelNames: ['rollout'] as const,
      registers,
      collect: () => rolloutsOnce(),
    }),
  };
  async function fillRollouts(): Promise<void> {
    for (const gauge of Object.values(rollout)) gauge.reset();
    const rollouts = await readWhileStoreWorks(() => controller.listRollouts(10));
    for (const r of rollouts ?? []) {
      for (const state of ['progressing', 'paused', 'succeeded', 'superseded'] as const) {
        rollout.state.set({ rollout: r.id, state }, r.state === state ? 1 : 0);
      }
      const byState = new Map<string, number>();
      for (const w of r.waves) byState.set(w.state, (byState.get(w.state) ?? 0) + 1);
      for (const [state, count] of byState) rollout.waves.set({ rollout: r.id, state }, count);
      rollout.currentWave.set({ rollout: r.id }, r.currentWave);
      const started = r.waves[r.currentWave]?.startedAt;
      if (started !== undefined && started !== null)
        rollout.waveStarted.set({ rollout: r.id }, started / 1000);
    }
  }

  /**
   * The fleet's gauges come from the store: while it is away they are left out (the store's own
   * metrics say why) and the rest is still served.
   */
  async function readWhileStoreWorks<T>(read: () => Promise<T>): Promise<T | undefined> {
    if (store.health().state === 'unavailable') return undefined;
    try {
      return await read();
    } catch (error) {
      if (store.noteFailure(error) === undefined) throw error;
      return undefined;
    }
  }

  return { registry, checkins, driftRepairs, requestDuration };
}

/** Runs `work` once for all callers that arrive while it runs. */
function shareRun(work: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () => {
    running ??= work().finally(() => {
      running = undefined;
    });
    return running;
  };
}
