import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    setupFiles: ['test/setup.ts'],
    // Generous on purpose: a case of eight CLI calls in a lab took over 30 s at load 13 on 2 cores
    // (each Node start ~3.5 s). These bound a hang; no test asserts how long anything takes.
    testTimeout: 120_000,
    hookTimeout: 180_000,
  },
});
