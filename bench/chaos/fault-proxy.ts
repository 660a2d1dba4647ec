/**
 * A TCP fault proxy in front of PostgreSQL: forwards every connection and, on demand, cuts
 * one (both sockets destroyed at once), preferring a connection that is inside a transaction
 * right now, so the cut lands between BEGIN and COMMIT: the server rolls the transaction back
 * and the client sees a broken connection mid-work.
 *
 * "Inside a transaction" is read off the wire: PostgreSQL's ReadyForQuery message ('Z')
 * carries the transaction status ('T' in a transaction block, 'E' failed one, 'I' idle).
 */
import net from 'node:net';

interface Link {
  client: net.Socket;
  server: net.Socket;
  /** Transaction status from the last ReadyForQuery seen: 'I', 'T' or 'E'. */
  status: string;
}

export interface FaultProxy {
  /** Port the proxy listens on (127.0.0.1). */
  port: number;
  /** Open connections now. */
  open(): number;
  /**
   * Cuts one connection, one inside a transaction when there is any.
   * @returns `mid-transaction`, `idle`, or `none` when no connection is open
   */
  cut(): 'mid-transaction' | 'idle' | 'none';
  close(): Promise<void>;
}

/** Starts the proxy on a free port, forwarding to `target`. */
export async function startFaultProxy(target: { host: string; port: number }): Promise<FaultProxy> {
  const links = new Set<Link>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    const link: Link = { client, server: upstream, status: 'I' };
    links.add(link);
    const end = () => {
      links.delete(link);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
    // ReadyForQuery is 'Z', int32 length 5, one status byte; it ends a server message burst,
    // so it sits at the end of a chunk (a scan for the last one is good enough for a proxy
    // whose only job is to pick a victim).
    upstream.on('data', (chunk: Buffer) => {
      for (let i = chunk.length - 6; i >= 0; i--) {
        if (chunk[i] === 0x5a && chunk.readInt32BE(i + 1) === 5) {
          link.status = String.fromCharCode(chunk[i + 5]!);
          break;
        }
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    open: () => links.size,
    cut() {
      const all = [...links];
      if (all.length === 0) return 'none';
      const inTx = all.filter((l) => l.status !== 'I');
      const pool = inTx.length > 0 ? inTx : all;
      const victim = pool[Math.floor(Math.random() * pool.length)]!;
      victim.client.destroy();
      victim.server.destroy();
      links.delete(victim);
      return inTx.length > 0 ? 'mid-transaction' : 'idle';
    },
    async close() {
      for (const l of links) {
        l.client.destroy();
        l.server.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
