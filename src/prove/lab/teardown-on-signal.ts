/** Something a signal must tear down before the process ends. */
interface Destroyable {
  destroy(): Promise<void>;
}

const live = new Set<Destroyable>();
const SIGNALS = ['SIGINT', 'SIGTERM'] as const;
const handlers = new Map<NodeJS.Signals, () => void>(
  SIGNALS.map((signal) => [signal, () => void onSignal(signal)]),
);
let installed = false;

/** Tears the lab down on SIGINT or SIGTERM until it is untracked; handlers exist only meanwhile. */
export function trackForSignals(lab: Destroyable): void {
  live.add(lab);
  if (installed) return;
  for (const [signal, handler] of handlers) process.on(signal, handler);
  installed = true;
}

export function untrackForSignals(lab: Destroyable): void {
  live.delete(lab);
  if (live.size === 0) uninstall();
}

function uninstall(): void {
  if (!installed) return;
  for (const [signal, handler] of handlers) process.off(signal, handler);
  installed = false;
}

async function onSignal(signal: NodeJS.Signals): Promise<void> {
  // A second signal during the teardown now gets the default action (end the process); the
  // reaper (reapStaleLabs) then removes what is left.
  uninstall();
  await Promise.allSettled([...live].map((lab) => lab.destroy()));
  // Listening to a signal disables its default action: end the process as the signal would have,
  // unless someone else listens too and has decided what to do.
  if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
}
