/**
 * The response-shape contract (protocol.md H23, docs/response-shapes.md): every row of
 * ./shapes.ts on every framework app given, over the memory store and PGlite. Each app is
 * started once plain (no idem) per file and once behind idem per store, and every row is sent
 * to both: the first client must get the plain framework's status and bytes, every replay the
 * same bytes; a body that breaks mid-way is never stored (the 500 problem, the key released or
 * resumable). An absent row is a skipped test that says why.
 */
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { assertProblem, bytes } from '../../helpers/http.js';
import { memoryRealClockFactory, storeFactories, type StoreFactory, useStoreBackend } from '../../helpers/stores.js';
import type { ShapeApp, ShapeSend } from './app.js';
import { BREAK, phaseRuns, type Shape, SHAPES, shapePath, TEXT } from './shapes.js';

/** The stores the contract runs over by default: the memory store and PGlite (shapes are adapter behaviour, not store behaviour). */
export const shapeStores: StoreFactory[] = [memoryRealClockFactory, ...storeFactories.filter((f) => f.name === 'PostgresStore on PGlite')];

const EXPECT: Record<Shape['expect'], string> = {
  stored: 'the first client gets the plain framework’s bytes, stored and replayed',
  passthrough: 'passes through unprotected, as the plain framework answers',
  refused: 'refused: the 500 problem, nothing sent raw, nothing stored',
  'fails-before-phase': 'the 500 problem, nothing stored, the retry runs fresh',
  'fails-after-phase': 'the 500 problem, nothing stored, the retry resumes after the phase',
};

/** Registers the contract for `apps` over `stores`. */
export function responseShapeContract(apps: ShapeApp[], stores: StoreFactory[] = shapeStores): void {
  // The plain apps need no store: one per framework for the whole file.
  const plainApps = new Map<ShapeApp, Promise<ShapeSend>>();
  const plainCleanups: Array<() => Promise<void>> = [];
  const plainOf = (app: ShapeApp) => {
    const started = plainApps.get(app) ?? app.start(undefined, (fn) => void plainCleanups.push(fn));
    plainApps.set(app, started);
    return started;
  };
  after(async () => {
    for (const fn of plainCleanups.reverse()) await fn().catch(() => undefined);
  });
  for (const factory of stores) {
    describe(`response shapes over ${factory.name}`, () => {
      const conn = useStoreBackend(factory);
      for (const app of apps) {
        describe(app.name, () => {
          const sends: { idem?: ShapeSend; plain?: ShapeSend } = {};
          const errors: unknown[] = [];
          before(async () => {
            const fresh = await conn.backend().fresh();
            conn.cleanup(() => fresh.drop());
            sends.plain = await plainOf(app);
            sends.idem = await app.start({ store: fresh.store, onHandlerError: (error) => errors.push(error) }, conn.cleanup);
          });
          for (const shape of SHAPES) {
            const absent = app.absent[shape.name];
            if (absent) it(`${shape.name}: no such shape (${absent})`, { skip: absent }, () => undefined);
            else it(`${shape.name}: ${shape.does} → ${EXPECT[shape.expect]}`, { timeout: 30_000 }, () => runRow(shape, sends.idem!, sends.plain!, errors));
          }
        });
      }
    });
  }
}

interface Answer {
  status: number;
  contentType: string | null;
  replayed: string | null;
  body: Buffer;
}

async function answer(response: Response): Promise<Answer> {
  return {
    status: response.status,
    contentType: response.headers.get('content-type'),
    replayed: response.headers.get('idempotent-replayed'),
    body: Buffer.from(await bytes(response)),
  };
}

const shown = (a: Answer) => `${a.status} ${a.contentType} ${JSON.stringify(a.body.toString('latin1'))}`;

/** The first client got what the plain framework sends, byte for byte. */
function assertSame(got: Answer, plain: Answer, what: string): void {
  assert.ok(plain.status < 500, `the plain framework answers this shape: ${shown(plain)}`);
  assert.equal(shown(got), shown(plain), `${what}: the plain framework's answer`);
}

async function runRow(shape: Shape, idem: ShapeSend, plain: ShapeSend, errors: unknown[]): Promise<void> {
  const key = `shape-${randomUUID()}`;
  const path = shapePath(shape.name as never);
  const method = shape.method ?? 'POST';
  const init = (k: string, extra: Record<string, string> = {}): RequestInit => ({
    method,
    headers: { 'idempotency-key': k, ...(method === 'HEAD' ? {} : { 'content-type': 'application/json' }), ...extra },
    body: method === 'HEAD' ? null : '{"amount":42}',
  });
  const plainAnswer = await answer(await plain(path, init(`${key}-plain`)));
  const runs = () => phaseRuns.get(key) ?? 0;
  switch (shape.expect) {
    case 'stored': {
      const first = await answer(await idem(path, init(key)));
      assertSame(first, plainAnswer, 'the first client');
      const replay = await answer(await idem(path, init(key)));
      assert.equal(replay.replayed, 'true', `a replay: ${shown(replay)}`);
      assert.equal(shown(replay), shown(first), 'the replay is the bytes the first client got');
      assert.equal(runs(), 1, 'the handler ran once');
      return;
    }
    case 'passthrough': {
      const first = await answer(await idem(path, init(key)));
      assertSame(first, plainAnswer, 'the answer');
      const second = await answer(await idem(path, init(key)));
      assert.equal(second.replayed, null, 'nothing was stored to replay');
      assert.equal(runs(), 2, 'unprotected: the handler ran each time');
      return;
    }
    case 'refused': {
      const seen = errors.length;
      await assertProblem(await idem(path, init(key)), 500, 'request-failed-retry');
      const error = errors.slice(seen).find((e) => e instanceof Error);
      assert.match(String((error as Error | undefined)?.message), /idem\/\w+: .*(hijack|ctx\.respond)/, 'onHandlerError got a clear error naming the shape');
      await assertProblem(await idem(path, init(key)), 500, 'request-failed-retry'); // not stored: refused again
      assert.equal(runs(), 1, 'the phase committed once; the retry resumed after it');
      return;
    }
    case 'fails-before-phase':
    case 'fails-after-phase': {
      await assertProblem(await idem(path, init(key, { [BREAK]: '1' })), 500, 'request-failed-retry');
      assert.equal(runs(), shape.expect === 'fails-after-phase' ? 1 : 0);
      const retry = await answer(await idem(path, init(key)));
      assert.equal(retry.replayed, null, `the retry ran: nothing was stored (${shown(retry)})`);
      assertSame(retry, plainAnswer, 'the retry');
      assert.equal(retry.body.toString(), TEXT);
      const replay = await answer(await idem(path, init(key)));
      assert.equal(replay.replayed, 'true');
      assert.equal(shown(replay), shown(retry));
      // The row without a phase runs none; the other committed its phase once, and the retry resumed after it.
      assert.equal(runs(), shape.expect === 'fails-after-phase' ? 1 : 0);
      return;
    }
  }
}
