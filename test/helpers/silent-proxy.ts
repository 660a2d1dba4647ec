/**
 * A TCP proxy in front of a server (PostgreSQL, Redis) that can go silent: in `forward` mode it
 * pipes every connection through; in `silent` mode it accepts connections and never forwards a
 * byte, in either direction, on new and open connections alike (a partition, a hung server, a
 * full SYN-ACK-only load balancer). Connections that lived through a silent spell stay silent
 * for good (their bytes were dropped, their protocol state is lost): the client must destroy
 * them. In `stall` mode it holds the bytes instead and delivers them, in order, when switched
 * back to `forward` (a stalled server that resumes: every reply arrives, late). In `refuse` mode
 * it resets every connection, open and new (a server that was killed: the port answers with a
 * reset). `cut()` destroys every open connection at once, with no message from the server
 * (a proxy restart, a killed pgbouncer, a NAT that forgot the flow).
 */
import net from 'node:net';

export interface SilentProxy {
  /** Port on 127.0.0.1. */
  port: number;
  /**
   * `forward`, `silent` or `stall`; switching to `forward` affects connections opened from then
   * on, and delivers what stalled connections held.
   */
  mode(next: Mode): void;
  /** Connections accepted so far. */
  accepted(): number;
  /** Chunks that stalled connections hold now (a statement in flight shows here in `stall` mode). */
  held(): number;
  /** Destroys every open connection on both sides now; new ones are served per the mode. */
  cut(): void;
  close(): Promise<void>;
}

/** What the proxy does with bytes: see {@link startSilentProxy}. */
export type Mode = 'forward' | 'silent' | 'stall' | 'refuse';

export async function startSilentProxy(target: { host: string; port: number }): Promise<SilentProxy> {
  let mode: Mode = 'forward';
  let accepted = 0;
  type Link = { client: net.Socket; upstream?: net.Socket; dead: boolean; held?: Array<() => void> };
  const links = new Set<Link>();
  const server = net.createServer((client) => {
    accepted++;
    if (mode === 'refuse') {
      client.on('error', () => undefined);
      client.resetAndDestroy();
      return;
    }
    const link: Link = { client, dead: mode === 'silent', ...(mode === 'stall' ? { held: [] } : {}) };
    links.add(link);
    const end = () => {
      links.delete(link);
      client.destroy();
      link.upstream?.destroy();
    };
    client.on('error', end).on('close', end);
    if (link.dead) {
      client.on('data', () => undefined); // read and drop
      return;
    }
    const upstream = net.connect(target.port, target.host);
    link.upstream = upstream;
    upstream.on('error', end).on('close', end);
    const pass = (to: net.Socket, chunk: Buffer) => {
      if (link.dead) return;
      if (link.held) link.held.push(() => to.write(chunk));
      else to.write(chunk);
    };
    client.on('data', (chunk) => pass(upstream, chunk));
    upstream.on('data', (chunk) => pass(client, chunk));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const cut = (reset: boolean) => {
    for (const link of links) {
      links.delete(link);
      if (reset) link.client.resetAndDestroy();
      else link.client.destroy();
      link.upstream?.destroy();
    }
  };
  return {
    port: (server.address() as net.AddressInfo).port,
    mode(next) {
      mode = next;
      if (next === 'refuse') cut(true);
      for (const link of links) {
        if (next === 'silent') link.dead = true;
        if (next === 'stall' && !link.dead) link.held ??= [];
        if (next === 'forward' && link.held) {
          const held = link.held;
          delete link.held;
          for (const write of held) write();
        }
      }
    },
    accepted: () => accepted,
    held: () => [...links].reduce((n, link) => n + (link.held?.length ?? 0), 0),
    cut: () => cut(false),
    close: () =>
      new Promise<void>((resolve) => {
        for (const link of links) {
          link.client.destroy();
          link.upstream?.destroy();
        }
        server.close(() => resolve());
      }),
  };
}
