import type { Output } from './output.js';

/** What every command module gets: where to write, and how to report its exit code. */
export interface CommandContext {
  readonly output: Output;
  setExit(code: number): void;
  /** The code a runtime error ends this command with, when not 2 (`plan --detailed-exitcode`). */
  setErrorExit(code: number): void;
}
