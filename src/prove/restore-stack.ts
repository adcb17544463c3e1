/** A restore, registered before the fault it undoes starts. */
export interface Restore {
  readonly what: string;
  readonly undo: () => Promise<void>;
  /** Checks the restore took: undefined when it did, else what is still wrong. */
  readonly verify?: () => Promise<string | undefined>;
}

/** What running one restore did. */
export interface RestoreRecord {
  readonly what: string;
  readonly ok: boolean;
  readonly error: string | null;
  /** Verified afterwards (or had nothing to verify). */
  readonly verified: boolean;
  readonly problem: string | null;
  readonly durationMs: number;
  /** Run because of a signal, not at the end of its scenario. */
  readonly onSignal: boolean;
}

/**
 * Restores run whatever happens: at the end of their scenario, when it fails, and when `prove`
 * gets SIGINT or SIGTERM (the lab runs this stack before it deletes its namespaces). Last
 * registered, first run; every restore runs even when an earlier one failed, then each is
 * verified.
 */
export class RestoreStack {
  private readonly pending: Restore[] = [];
  private readonly done: RestoreRecord[] = [];
  private unwinding: Promise<RestoreRecord[]> | undefined;

  /** Registers a restore; call it before starting the fault. */
  push(restore: Restore): void {
    this.pending.push(restore);
  }

  get size(): number {
    return this.pending.length;
  }

  get records(): readonly RestoreRecord[] {
    return this.done;
  }

  /** Runs every pending restore, then verifies each; returns what happened. */
  unwind(options: { readonly onSignal?: boolean } = {}): Promise<RestoreRecord[]> {
    // One unwind at a time: a signal during a scenario's own unwind waits for it.
    const previous = this.unwinding ?? Promise.resolve([]);
    const next = previous.then(() => this.runPending(options.onSignal === true));
    this.unwinding = next;
    return next;
  }

  private async runPending(onSignal: boolean): Promise<RestoreRecord[]> {
    const batch = this.pending.splice(0).reverse();
    const ran: { restore: Restore; ok: boolean; error: string | null; ms: number }[] = [];
    for (const restore of batch) {
      const started = performance.now();
      try {
        await restore.undo();
        ran.push({ restore, ok: true, error: null, ms: performance.now() - started });
      } catch (error) {
        ran.push({ restore, ok: false, error: messageOf(error), ms: performance.now() - started });
      }
    }
    const records: RestoreRecord[] = [];
    for (const { restore, ok, error, ms } of ran) {
      let problem: string | null = null;
      try {
        problem = (await restore.verify?.()) ?? null;
      } catch (verifyError) {
        problem = `cannot verify: ${messageOf(verifyError)}`;
      }
      records.push({
        what: restore.what,
        ok,
        error,
        verified: problem === null && ok,
        problem,
        durationMs: Math.round(ms),
        onSignal,
      });
    }
    this.done.push(...records);
    return records;
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
