/**
 * A TCP proxy that loses the first response, for the payments tests with the official stripe
 * SDK: it forwards the first connection's request, reads the server's complete response (so the
 * server has committed), then resets the client socket instead of forwarding it. Later
 * connections pass through.
 */
import net from 'node:net';

export interface ResetProxy {
  port: number;
  /** The request line and Idempotency-Key of every connection's first request. */
  requests: Array<{ connection: number; requestLine: string; idempotencyKey: string | undefined }>;
  /** The response the first connection never delivered. */
  swallowed: Promise<{ status: number; body: Buffer }>;
  close(): Promise<void>;
}

export async function startResetProxy(upstreamPort: number): Promise<ResetProxy> {
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const requests: ResetProxy['requests'] = [];
  let swallow!: (value: { status: number; body: Buffer }) => void;
  const swallowed = new Promise<{ status: number; body: Buffer }>((resolve) => (swallow = resolve));
  const server = net.createServer((client) => {
    const connection = connections++;
    const upstream = net.connect(upstreamPort, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => sockets.delete(s));
    }
    let head = Buffer.alloc(0);
    let recorded = false;
    client.on('data', (chunk: Buffer) => {
      if (!recorded) {
        head = Buffer.concat([head, chunk]);
        const end = head.indexOf('\r\n\r\n');
        if (end >= 0) {
          recorded = true;
          const lines = head.subarray(0, end).toString('latin1').split('\r\n');
          const keyLine = lines.find((l) => /^idempotency-key:/i.test(l));
          requests.push({ connection, requestLine: lines[0]!, idempotencyKey: keyLine?.replace(/^[^:]*:\s*/, '').trim() });
        }
      }
      upstream.write(chunk);
    });
    client.on('end', () => upstream.end());
    client.on('close', () => upstream.destroy());
    if (connection === 0) {
      let response = Buffer.alloc(0);
      upstream.on('data', (chunk: Buffer) => {
        response = Buffer.concat([response, chunk]);
        const complete = completeResponse(response);
        if (complete) {
          swallow(complete);
          client.resetAndDestroy();
          upstream.destroy();
        }
      });
    } else {
      upstream.pipe(client);
      upstream.on('close', () => client.destroy());
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    requests,
    swallowed,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** The status and body once `bytes` hold one complete HTTP/1.1 response, else undefined. */
export function completeResponse(bytes: Buffer): { status: number; body: Buffer } | undefined {
  const end = bytes.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const lines = bytes.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(lines[0]!.split(' ')[1]);
  const header = (name: string) =>
    lines
      .find((l) => l.toLowerCase().startsWith(name + ':'))
      ?.slice(name.length + 1)
      .trim();
  const rest = bytes.subarray(end + 4);
  const length = header('content-length');
  if (length !== undefined) return rest.length >= Number(length) ? { status, body: rest.subarray(0, Number(length)) } : undefined;
  if (/chunked/i.test(header('transfer-encoding') ?? '')) {
    if (!rest.subarray(-5).equals(Buffer.from('0\r\n\r\n'))) return undefined;
    const body: Buffer[] = [];
    let at = 0;
    for (;;) {
      const nl = rest.indexOf('\r\n', at);
      const size = parseInt(rest.subarray(at, nl).toString('latin1'), 16);
      if (!size) break;
      body.push(rest.subarray(nl + 2, nl + 2 + size));
      at = nl + 2 + size + 2;
    }
    return { status, body: Buffer.concat(body) };
  }
  return undefined;
}
