/**
 * The `'error'` event of a node-postgres connection while idem holds it (protocol.md H23).
 *
 * node-postgres emits `'error'` on a client whose socket ends or fails (a proxy restart, a
 * killed pgbouncer, a NAT that forgot the flow: the socket ends with no message from the
 * server), after it failed the statement in flight with the same error. A checked-out client
 * has no pool listener for it (the pool hears idle clients only), and an `'error'` with no
 * listener ends the Node process. The failed statement already carries the error to idem (the
 * request answers 503, the connection is destroyed), so the event itself has nothing left to
 * say: idem hears it and drops it, as `pool.query()` does for its own checkouts.
 */

/** A connection that emits `'error'` (node-postgres `Client`); other clients (PGlite) have no `on`. */
interface ErrorEmitter {
  on?(event: 'error', listener: (error: Error) => void): unknown;
}

const heard = new WeakSet<object>();
const drop = (): void => undefined;

/** Gives `conn` a listener for its `'error'` event, once per connection. */
export function hearConnectionErrors(conn: object): void {
  const emitter = conn as ErrorEmitter;
  if (heard.has(conn) || typeof emitter.on !== 'function') return;
  heard.add(conn);
  emitter.on('error', drop);
}
