/**
 * The faults of the connection-fault contract, each done to every proxy in front of an entry's
 * servers (test/helpers/silent-proxy.ts). A fault starts while the service is warm, makes at
 * least one request meet it, and leaves the proxies forwarding again (the server is back).
 */
import type { SilentProxy } from '../../helpers/silent-proxy.js';
import { poll } from '../../helpers/wait.js';

/** What a fault works with: the proxies, and a way to send one request that the contract checks for a 503. */
export interface FaultScene {
  proxies: SilentProxy[];
  /**
   * Sends `count` requests at once (default 1), each with a new key; the contract checks each
   * answers 503 with Retry-After within the deadline + 1 s.
   */
  expect503(what: string, count?: number): Promise<void>;
  /**
   * Sends one request and returns its check, for a request that must be in flight when the
   * fault hits. `path` `/charge-held` holds the request inside its phase's transaction until
   * the proxies forward again, printing `in phase <n>` once there. `also500`: idem's retryable
   * 500 problem (`request-failed-retry`) passes too: a phase whose transaction broke is a failed
   * attempt of the handler (protocol.md K5), not a store refusing the claim.
   */
  start503(what: string, path?: '/charge' | '/charge-held', also500?: boolean): Promise<void>;
  /** Resolves once the service printed `pattern`. */
  line(pattern: RegExp): Promise<void>;
  /** Waits `ms` with no traffic. */
  idle(ms: number): Promise<void>;
  /** The entry's idle spell: longer than its client's timers. */
  idleMs: number;
}

/** One fault: a name for the test title and what it does. */
export interface Fault {
  name: string;
  /** Injects the fault, sends the requests that meet it, then forwards again. */
  run(scene: FaultScene): Promise<void>;
}

/** Requests at once in the black hole: more than the connections any entry's client opens (5). */
export const BURST = 8;

const all = (scene: FaultScene, fn: (p: SilentProxy) => void) => scene.proxies.forEach(fn);

export const faults: Fault[] = [
  {
    name: 'a socket destroyed mid-statement with no server message',
    async run(scene) {
      // Stalled, the request's statement stays in the proxy: the cut is certain to land mid-statement.
      all(scene, (p) => p.mode('stall'));
      const inFlight = scene.start503('the request whose statement was cut');
      await poll(() => (scene.proxies.some((p) => p.held() > 0) ? true : undefined), 10_000, 'a statement in flight');
      all(scene, (p) => {
        p.cut();
        p.mode('forward');
      });
      await inFlight;
    },
  },
  {
    name: "a socket destroyed mid-transaction (the phase's write or its COMMIT)",
    async run(scene) {
      const inFlight = scene.start503('the request whose transaction was cut', '/charge-held', true);
      await scene.line(/in phase/);
      all(scene, (p) => p.mode('stall'));
      await scene.line(/phase body done/);
      await poll(() => (scene.proxies.some((p) => p.held() > 0) ? true : undefined), 10_000, "the phase's statement in flight");
      all(scene, (p) => {
        p.cut();
        p.mode('forward');
      });
      await inFlight;
    },
  },
  {
    name: 'the server killed (every connection reset, new ones refused)',
    async run(scene) {
      all(scene, (p) => p.mode('refuse'));
      await scene.expect503('a request while the server is down');
      await scene.expect503('a second request while the server is down');
      all(scene, (p) => p.mode('forward'));
    },
  },
  {
    name: 'a black hole (connections accepted, never answered)',
    async run(scene) {
      all(scene, (p) => p.mode('silent'));
      await scene.expect503('a request into the black hole');
      // More at once than any entry's pool holds: every connection ends up stuck in the hole.
      await scene.expect503('requests into the black hole, more than the pool holds', BURST);
      all(scene, (p) => p.mode('forward'));
    },
  },
  {
    name: "an idle spell longer than the client's timers behind a dead link",
    async run(scene) {
      all(scene, (p) => p.mode('silent'));
      await scene.idle(scene.idleMs);
      await scene.expect503('the first request after the idle spell');
      all(scene, (p) => p.mode('forward'));
    },
  },
];
