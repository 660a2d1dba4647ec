/**
 * A TCP fault proxy in front of PostgreSQL (or MySQL): forwards every connection and, on demand, cuts
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

/**
 * Starts the proxy on a free port, forwarding to `target`. `mysql`: the server speaks MySQL's
 * protocol, and "inside a transaction" is read off the client's statements instead (see
 * {@link mysqlStatus}).
 */
export async function startFaultProxy(target: { host: string; port: number; protocol?: 'postgres' | 'mysql' }): Promise<FaultProxy> {
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
    if (target.protocol === 'mysql') {
      client.on('data', mysqlStatus(link));
      return;
    }
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

/**
 * MySQL: a connection is in a transaction from the `START TRANSACTION` (or `BEGIN`) its client
 * sent until its `COMMIT` or `ROLLBACK` (COM_QUERY packets, command byte 0x03, as mysql2 sends
 * every statement of idem and of the example). Packets are framed by their 3-byte length;
 * only the first bytes of each are read.
 */
function mysqlStatus(link: Link): (chunk: Buffer) => void {
  let pending: Buffer | undefined;
  let skip = 0;
  return (chunk) => {
    const buf = pending ? Buffer.concat([pending, chunk]) : chunk;
    pending = undefined;
    let i = 0;
    while (i < buf.length) {
      if (skip > 0) {
        const n = Math.min(skip, buf.length - i);
        skip -= n;
        i += n;
        continue;
      }
      if (buf.length - i < 4) {
        pending = buf.subarray(i);
        break;
      }
      const length = buf.readUIntLE(i, 3);
      const head = Math.min(length, 24);
      if (buf.length - i < 4 + head) {
        pending = buf.subarray(i);
        break;
      }
      if (head > 0 && buf[i + 4] === 0x03) {
        const text = buf
          .toString('latin1', i + 5, i + 4 + head)
          .trimStart()
          .toUpperCase();
        if (text.startsWith('START TRANSACTION') || text.startsWith('BEGIN')) link.status = 'T';
        else if (text.startsWith('COMMIT') || text.startsWith('ROLLBACK')) link.status = 'I';
      }
      i += 4;
      skip = length;
    }
  };
}
