/**
 * The gateway guide's embedded example (examples/gateway/embed.ts) run as the guide shows it, on
 * PostgreSQL, in front of the Python upstream: a replay, a 422, one effect. Its YAML config
 * (examples/gateway/gateway.yaml) is valid as shipped.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { parse } from 'yaml';
import { startGateway } from '../examples/gateway/embed.js';
import { parseGatewayConfig } from '../src/gateway/index.js';
import { post, type PythonUpstream, startPythonUpstream } from './helpers/gateway.js';
import { needs, serviceUrl } from './helpers/services.js';

describe('examples/gateway/gateway.yaml', () => {
  it('is a valid configuration', () => {
    const config = parseGatewayConfig(parse(readFileSync(new URL('../examples/gateway/gateway.yaml', import.meta.url), 'utf8')));
    assert.equal(config.routes.length, 3);
    assert.deepEqual(config.routes[2]!.principal, { header: 'x-tenant-id' });
  });
});

describe('examples/gateway/embed.ts on PostgreSQL', { skip: needs('DATABASE_URL') }, () => {
  const table = `gw_example_${process.pid}`;
  let upstream: PythonUpstream;
  let running: Awaited<ReturnType<typeof startGateway>>;
  before(async () => {
    upstream = await startPythonUpstream();
    running = await startGateway(serviceUrl('DATABASE_URL')!, upstream.url, '127.0.0.1:0', table);
  });
  after(async () => {
    process.removeListener('SIGTERM', running.stop);
    await running.stop();
    await upstream.stop();
    const pool = new pg.Pool({ connectionString: serviceUrl('DATABASE_URL')!, max: 1 });
    await pool.query(`DROP TABLE IF EXISTS ${table}_blobs, ${table} CASCADE; DROP SEQUENCE IF EXISTS ${table}_lock_version_seq`).catch(() => undefined);
    await pool.end();
  });

  it('replays, answers 422 to another body, and applies one effect', async () => {
    const key = randomUUID();
    const headers = { authorization: 'Bearer sk_test', 'idempotency-key': key };
    const first = await post(`${running.url}/v1/charges`, headers, '{"amount":1999}');
    const again = await post(`${running.url}/v1/charges`, headers, '{"amount":1999}');
    assert.equal(first.status, 201);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(again.bytes, first.bytes);
    assert.equal((await post(`${running.url}/v1/charges`, headers, '{"amount":2999}')).status, 422);
    assert.equal((await upstream.state()).effects.filter((e) => e.key === key).length, 1);
  });
});
