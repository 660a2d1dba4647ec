/**
 * Notices a connection that went silent for good (a black hole: a proxy, balancer or NAT that
 * lost the flow accepts bytes and never answers) and makes the client reconnect
 * (protocol.md H25). Neither driver does it by default under traffic: node-redis's
 * `socketTimeout` is an inactivity timer that every write resets, and ioredis has no timer
 * unless `socketTimeout` is set. Without this, a black-holed link answers 503 until TCP gives
 * up (minutes) or the service restarts.
 *
 * The rule: one of idem's commands has waited `silentMs` with no reply → its connection is dead
 * (Redis answers in order on a connection, so nothing behind it is answered either); the client
 * drops its sockets and reconnects. Checked when a command misses its deadline, at most once per
 * `silentMs`. A healthy Redis answers in milliseconds, and a stalled one (a long script, a fork)
 * that resumes within `silentMs` keeps its connection. On a Cluster the dead link is one node's,
 * and idem cannot tell which: every node reconnects. A command dropped with a socket may still
 * have run on the server: safe, as for any command past its deadline (comment on `toRunner`).
 */
import type { RedisDriver } from './client.js';

/** How idem resets the links of one kind of client. */
type Reset = () => void;

type IoNode = { stream?: { destroy(error?: Error): void }; status?: string };

/** ioredis statuses with a socket to destroy: opening (`connecting`), waiting on its ready check (`connect`), `ready`. */
const LIVE = new Set(['connecting', 'connect', 'ready']);

const resetError = () => new Error('idem/redis: a command got no reply for silentLinkMs, reconnecting');

/**
 * The reset of `client`, or `undefined` for a client idem does not know (a custom one).
 * - ioredis `Redis`: destroys its socket (`stream`), ready or still opening, as ioredis's own
 *   `socketTimeout` does; ioredis reconnects with its `retryStrategy` and resends the commands
 *   still unanswered. ioredis `Cluster`: the same on every node.
 * - GLIDE: none (`undefined`): its core checks and reconnects its own connections.
 * - node-redis client or cluster: `destroy()` then `connect()` (node-redis has no call that
 *   drops only the socket); commands waiting on the dead socket are rejected. Only a client
 *   that is open, so a client the application closed stays closed; a cluster whose
 *   rediscovery fails (Redis still silent) is connected again at the next check.
 */
export function resetOf(driver: RedisDriver): Reset | undefined {
  // GLIDE's core owns its connections (a heartbeat per connection, its own reconnect) and has no
  // call that drops one: idem leaves it alone (protocol.md K55).
  if (driver.kind === 'glide') return undefined;
  if (driver.kind === 'ioredis') {
    const io = driver.client as unknown as IoNode & { nodes?: () => IoNode[] };
    // Not only `ready`: a connection opened into the black hole (a lazy Cluster node's first one,
    // or ioredis's own reconnect) stays in `connect` for good, its ready check never answered
    // and ioredis's `connectTimeout` already cleared at the TCP connect. Skipping it left that
    // node's slots answering 503 after the others recovered (protocol.md H25).
    const drop = (node: IoNode) => {
      if (node.status !== undefined && LIVE.has(node.status)) node.stream?.destroy(resetError());
    };
    return driver.cluster ? () => io.nodes?.().forEach(drop) : () => drop(io);
  }
  const nr = driver.client as unknown as { isOpen?: boolean; destroy?: () => void; connect?: () => Promise<unknown> };
  if (typeof nr.destroy !== 'function' || typeof nr.connect !== 'function') return undefined;
  let reopening = false; // idem closed it and owes it a connect
  const reopen = () => {
    nr.connect!().then(
      () => {
        reopening = false;
      },
      () => undefined, // a single client retries inside connect(); a cluster is retried at the next check
    );
  };
  return () => {
    if (reopening && !nr.isOpen) return reopen();
    if (!nr.isOpen) return;
    reopening = true;
    nr.destroy!();
    reopen();
  };
}

/** Watches idem's commands on one client: {@link SilentLink.sent} wraps every one it sends. */
export class SilentLink {
  /** Send time (performance.now() ms) of each command not answered yet. */
  private readonly waiting = new Set<{ at: number }>();
  private lastResetMs = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly silentMs: number,
    private readonly reset: Reset,
  ) {}

  /** Follows `reply` of a command just sent; returns it unchanged. */
  sent<T>(reply: Promise<T>): Promise<T> {
    const entry = { at: performance.now() };
    this.waiting.add(entry);
    const answered = () => void this.waiting.delete(entry);
    reply.then(answered, answered);
    return reply;
  }

  /** Called when a command missed its deadline: resets the links if one command has waited `silentMs`. */
  missed(): void {
    const now = performance.now();
    if (now - this.lastResetMs < this.silentMs) return; // a reconnect under way shows no reply yet either
    // A Set iterates in insertion order and `at` only grows: its first entry waited longest.
    const oldest = this.waiting.values().next().value?.at ?? now;
    if (now - oldest < this.silentMs) return;
    this.lastResetMs = now;
    this.reset();
  }
}
