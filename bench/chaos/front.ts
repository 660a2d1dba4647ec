/**
 * The round-robin front: a small HTTP proxy that sends each request to the next live worker.
 * A worker that dies mid-request leaves the client with a 502 (or a reset), as a real load
 * balancer would; the client retries with the same key.
 */
import http from 'node:http';

export interface Front {
  port: number;
  close(): Promise<void>;
}

/** Starts the front on a free port; `upstreams()` gives the live workers' ports, read per request. */
export async function startFront(upstreams: () => number[]): Promise<Front> {
  let next = 0;
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  const server = http.createServer((req, res) => {
    const ports = upstreams();
    if (ports.length === 0) {
      res.writeHead(503, { 'retry-after': '1' }).end();
      return;
    }
    const port = ports[next++ % ports.length]!;
    const upstream = http.request({ host: '127.0.0.1', port, method: req.method, path: req.url, headers: req.headers, agent }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
      answer.on('error', () => res.destroy());
    });
    upstream.on('error', () => {
      if (!res.headersSent) res.writeHead(502).end();
      else res.destroy();
    });
    req.pipe(upstream);
    // The client gave up (its attempt timed out): stop waiting on the worker too.
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
  });
  server.keepAliveTimeout = 5000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    async close() {
      server.closeAllConnections();
      agent.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
