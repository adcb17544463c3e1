import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'sim/**/*.test.ts', 'test/**/*.test.ts'],
    setupFiles: ['test/setup.ts'],
    // The simulators' shims (sim/pf/macos-tools/) run the models from sim/dist/: built first.
    globalSetup: ['sim/build.mjs'],
    // Most files wait on the kernel, child processes and servers far more than they compute, and
    // every one works in namespaces, ports and directories of its own: one file more than there
    // are cores (Vitest's default is one fewer, so a single worker on 2 cores) took the suite in
    // a fresh clone from 473 s to 267 s on 2 cores.
    maxWorkers: Math.max(availableParallelism() + 1, 3),
    // Generous on purpose: a case of eight CLI calls in a lab took over 30 s at load 13 on 2 cores
    // (each Node start ~3.5 s), and cases of the confirm-revert and lab-kit files crossed 120 s at
    // load 25. These bound a hang; no test asserts how long anything takes.
    testTimeout: 240_000,
    hookTimeout: 180_000,
  },
});
