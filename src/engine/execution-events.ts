/**
 * What an engine reports to `onEvent` (logs, metrics): the events of a key's claim, phases,
 * finish and end, and their delivery, which never changes the outcome of the work.
 */

/** Observability events, for logs and metrics. */
export type IdempotencyEvent = {
  type:
    | 'claimed'
    | 'replayed'
    | 'waited'
    | 'mismatch'
    | 'in-progress'
    | 'taken-over'
    | 'phase-committed'
    | 'phase-skipped'
    | 'finished'
    | 'released'
    | 'discarded'
    | 'lease-lost'
    | 'store-unavailable';
  scope: string;
  key: string;
  /** The phase, for phase events. */
  phase?: string;
  /** The fencing token held, where there is one. */
  token?: number;
  /** `waited` (a duplicate that waited for the result, protocol.md K17): how long it waited, in ms. */
  waitedMs?: number;
};

/** Delivers an event to an observer; an observer's failure never changes the outcome of the work. */
export function notify(onEvent: ((event: IdempotencyEvent) => void) | undefined, event: IdempotencyEvent): void {
  if (!onEvent) return;
  try {
    onEvent(event);
  } catch {
    // Swallowed on purpose: observers are for logs and metrics.
  }
}
