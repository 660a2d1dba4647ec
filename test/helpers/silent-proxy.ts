/**
 * A TCP proxy in front of PostgreSQL that can go silent: in `forward` mode it pipes every
 * connection through; in `silent` mode it accepts connections and never forwards a byte, in
 * either direction, on new and open connections alike (a partition, a hung server, a full
 * SYN-ACK-only load balancer). Connections that lived through a silent spell stay silent for
 * good (their bytes were dropped, their protocol state is lost): the client must destroy them.
 */
import net from 'node:net';

export interface SilentProxy {
  /** Port on 127.0.0.1. */
  port: number;
  /** `forward` or `silent`; switching to `forward` affects connections opened from then on. */
  mode(next: 'forward' | 'silent'): void;
  /** Connections accepted so far. */
  accepted(): number;
  close(): Promise<void>;
}

export async function startSilentProxy(target: { host: string; port: number }): Promise<SilentProxy> {
  let mode: 'forward' | 'silent' = 'forward';
  let accepted = 0;
  const links = new Set<{ client: net.Socket; upstream?: net.Socket; dead: boolean }>();
  const server = net.createServer((client) => {
    accepted++;
    const link: { client: net.Socket; upstream?: net.Socket; dead: boolean } = { client, dead: mode === 'silent' };
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
    client.on('data', (chunk) => {
      if (!link.dead) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!link.dead) client.write(chunk);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    mode(next) {
      mode = next;
      if (next === 'silent') for (const link of links) link.dead = true;
    },
    accepted: () => accepted,
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
