import type { Output } from './output.js';

/** What every command module gets: where to write, and how to report its exit code. */
export interface CommandContext {
  readonly output: Output;
  setExit(code: number): void;
}
