/**
 * Notices a connection that went silent for good (a black hole: a proxy, balancer or NAT that
 * lost the flow accepts bytes and never answers) and makes the client reconnect
 * (protocol.md H24). Neither driver does it by default under traffic: node-redis's
 * `socketTimeout` is an inactivity timer that every write resets, and ioredis has no timer
 * unless `socketTimeout` is set. Without this, a black-holed link answers 503 until TCP gives
 * up (minutes) or the service restarts.
 *
 * The rule: idem's commands have waited `silentMs` with no reply at all (no answer to any of
 * them, not even an error) → the link is dead; the client drops its socket and reconnects.
 * A healthy Redis answers in milliseconds, and a stalled one (a long script, a fork) that
 * resumes within `silentMs` keeps its connection. A command dropped with the socket may still
 * have run on the server: safe, as for any command past its deadline (comment on `toRunner`).
 */

/** How idem resets the link of one kind of client. */
type Reset = () => void;

/**
 * The reset of `client`, or `undefined` when idem knows none (a custom client, a Cluster:
 * each Cluster node's own connection is not idem's to judge from replies that other nodes
 * keep sending).
 * - ioredis `Redis`: destroys its socket (`stream`), as ioredis's own `socketTimeout` does;
 *   ioredis reconnects with its `retryStrategy` and resends the commands still unanswered.
 * - node-redis client: `destroy()` then `connect()` (node-redis has no public call that
 *   drops only the socket); only while the client is open, so a client the application
 *   closed stays closed. Commands waiting on the dead socket are rejected.
 */
export function resetOf(client: unknown): Reset | undefined {
  const io = client as { call?: unknown; isCluster?: boolean; stream?: { destroy(error?: Error): void }; status?: string };
  if (typeof io.call === 'function') {
    if (io.isCluster) return undefined;
    return () => {
      if (io.status === 'ready') io.stream?.destroy(new Error('idem/redis: no reply on this connection, reconnecting'));
    };
  }
  const nr = client as { sendCommand?: unknown; isOpen?: boolean; destroy?: () => void; connect?: () => Promise<unknown> };
  if ('masters' in (client as object) || typeof nr.destroy !== 'function' || typeof nr.connect !== 'function') return undefined;
  return () => {
    if (!nr.isOpen) return;
    nr.destroy!();
    nr.connect!().catch(() => undefined); // reconnects with the client's reconnectStrategy; its errors go to its 'error' listeners
  };
}

/** Watches the replies of one client: {@link SilentLink.sent} wraps every command idem sends. */
export class SilentLink {
  /** Commands sent and not yet answered. */
  private waiting = 0;
  /** Since when idem has waited with no reply (performance.now() ms), while `waiting > 0`. */
  private silentSince = 0;

  constructor(
    private readonly silentMs: number,
    private readonly reset: Reset,
  ) {}

  /** Follows `reply` of a command just sent; returns it unchanged. */
  sent<T>(reply: Promise<T>): Promise<T> {
    if (this.waiting++ === 0) this.silentSince = performance.now();
    const answered = () => {
      this.waiting--;
      this.silentSince = performance.now();
    };
    reply.then(answered, answered);
    return reply;
  }

  /** Called when a command missed its deadline: resets the link if it has been silent `silentMs`. */
  missed(): void {
    if (this.waiting === 0 || performance.now() - this.silentSince < this.silentMs) return;
    // Once per silent spell: a reconnect that is still under way shows no reply yet either.
    this.silentSince = performance.now();
    this.reset();
  }
}
