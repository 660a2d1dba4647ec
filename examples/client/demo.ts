/**
 * idem/client against the example payments API with an injected connection drop:
 *
 *   npx tsx examples/client/demo.ts                 # starts its own payments server (PGlite in a temp dir)
 *   API_URL=http://127.0.0.1:3000 npx tsx examples/client/demo.ts   # or uses a running `npm start`
 *
 * A small proxy between the client and the API lets the first attempt of every intent reach the
 * server, waits until the server has answered (the charge is committed), then resets the
 * connection, so the client never sees that answer. The client retries with the same key and
 * gets the replay. At the end the demo reads `GET /v1/psp/charges` and prints one line per
 * intent: it exits 1 unless every intent has exactly one PSP charge. INTENTS sets how many (5).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FileIntentStore, IdempotentClient } from 'idem/client/node';

const intents = Number(process.env.INTENTS ?? 5);
const temp = mkdtempSync(join(tmpdir(), 'idem-client-demo-'));
const { url: api, stop } = process.env.API_URL ? { url: process.env.API_URL, stop: () => undefined } : await startServer();

// The lossy network: every key's first request is forwarded, answered by the server, and lost.
const seenKeys = new Set<string>();
let dropped = 0;
const proxy = http.createServer(async (req, res) => {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const key = req.headers['idempotency-key'] as string | undefined;
  const drop = key !== undefined && !seenKeys.has(key);
  if (key) seenKeys.add(key);
  const target = new URL(req.url ?? '/', api);
  const upstream = await fetch(target, {
    method: req.method,
    headers: req.headers as Record<string, string>,
    body: chunks.length ? Buffer.concat(chunks) : undefined,
  });
  const body = Buffer.from(await upstream.arrayBuffer());
  if (drop) {
    dropped++;
    return req.socket.resetAndDestroy(); // the server committed; the client gets ECONNRESET
  }
  res.writeHead(upstream.status, {
    'content-type': upstream.headers.get('content-type') ?? 'application/octet-stream',
    ...(upstream.headers.get('idempotent-replayed') ? { 'idempotent-replayed': 'true' } : {}),
  });
  res.end(body);
});
await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
const viaProxy = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;

const client = new IdempotentClient({
  store: new FileIntentStore({ dir: join(temp, 'intents') }), // durable: a restart would resumePending()
  headers: { authorization: 'Bearer sk_test_client_demo' }, // sent on every attempt, never written to disk
  baseDelayMs: 100,
  onRetry: (e) =>
    console.log(`  retry  ${e.key} after attempt ${e.attempt} (${e.status ?? String((e.error as Error).cause ?? e.error)}), waiting ${e.delayMs} ms`),
});
await client.resumePending(); // nothing here on a fresh run; after a crash it finishes the interrupted intents

const run = Date.now().toString(36);
const results: Array<{ customer: string; key: string; status: number; replayed: boolean; attempts: number; charge: string }> = [];
for (let i = 1; i <= intents; i++) {
  const customer = `cus_demo_${run}_${i}`;
  const res = await client.fetch(`${viaProxy}/v1/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ amount: 1000 + i, currency: 'usd', customer }),
  });
  const body = (await res.json()) as { id?: string };
  results.push({ customer, key: res.idempotencyKey!, status: res.status, replayed: res.replayed, attempts: res.attempts, charge: body.id ?? '-' });
}

const { data } = (await (await fetch(`${api}/v1/psp/charges`)).json()) as { data: Array<{ customer: string }> };
console.log(`\n${dropped} responses dropped after the server committed them\n`);
console.log('idempotency key                        status replayed attempts charge                               PSP charges');
let ok = true;
for (const r of results) {
  const psp = data.filter((c) => c.customer === r.customer).length;
  ok &&= psp === 1 && r.status === 201;
  console.log(
    `${r.key.padEnd(38)} ${String(r.status).padEnd(6)} ${String(r.replayed).padEnd(8)} ${String(r.attempts).padEnd(8)} ${r.charge.padEnd(36)} ${psp}`,
  );
}
console.log(ok ? '\nexactly one PSP charge per intent' : '\nFAILED: an intent has no or several PSP charges');

proxy.close();
await stop();
rmSync(temp, { recursive: true, force: true });
process.exit(ok ? 0 : 1);

/** The example payments server on a fresh PGlite directory and a free port. */
async function startServer(): Promise<{ url: string; stop: () => Promise<void> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'examples/payments/server.ts'], {
    env: { ...process.env, PORT: '0', IDEM_DATA_DIR: join(temp, 'db') },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const match = /listening on (http:\/\/\S+)/.exec(out);
      if (match) resolve(match[1]!);
    });
    void exited.then(() => reject(new Error(`the payments server exited before listening:\n${out}`)));
  });
  console.log(`payments server at ${url} (PGlite in ${temp})`);
  return { url, stop: () => (child.kill('SIGTERM'), exited) };
}
