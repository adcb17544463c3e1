/**
 * Test fault only (EGRESSGUARD_FAULTS="compile.disable-kill-switch=on"): a deliberately broken
 * build whose tables carry no kill-switch drop. Steering still blackholes a dead tunnel, so only a
 * proof of each layer alone (DESIGN.md §4) can catch it; `prove` must. Never on by default.
 */
export const DISABLE_KILL_SWITCH_FAULT = 'compile.disable-kill-switch';

/**
 * Removes every kill-switch rule (its rate-limited log and its counted drop) from a ruleset; the
 * named counter stays declared, so it reads 0, like a guard that is trusted and never fires.
 */
export function disableKillSwitch(ruleset: string): string {
  return ruleset
    .split('\n')
    .filter(
      (line) =>
        !/^\t\t.*(drop comment "[^"]*\/kill-switch"|log prefix "eg drop [^"]*\/kill-switch )/.test(
          line,
        ),
    )
    .join('\n');
}

/**
 * Test fault only (EGRESSGUARD_FAULTS="steering.lose-rules=on"): something on the host deletes our
 * routing rules as soon as they are added (as systemd-networkd does with foreign rules): the
 * apply must see it in its read-back and say PartiallyApplied, every time, not only when a racing
 * deleter happens to win. Never on by default.
 */
export const LOSE_RULES_FAULT = 'steering.lose-rules';
