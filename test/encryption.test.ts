/**
 * Encryption at rest of stored responses (issue 6, part 5): AES-256-GCM with key ids, bound to
 * its row by AAD, inline and out of line alike. Run on PGlite and, with DATABASE_URL, on
 * PostgreSQL; the database is inspected directly to see what is actually stored.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { engines, freshStore, useEngine } from './helpers/engines.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { aesGcmCipher, PostgresStore, responseAad, type EncryptionOptions } from '../src/postgres/index.js';
import type { Queryable, SqlClient } from '../src/postgres/client.js';
import type { StoredResponse } from '../src/store/types.js';
import { InvalidOptionError, ResponseUnreadableError, UnknownKeyIdError } from '../src/core/errors.js';

const q = (client: SqlClient): Queryable => client as Queryable;
const fp = (n: number): Uint8Array => new Uint8Array(32).fill(n);
const enc = new TextEncoder();
const K1 = randomBytes(32);
const K2 = randomBytes(32);
const SECRET = 'jane.doe@example.com';
const LOCATION = `/v1/customers/${SECRET}`;
const INLINE_MAX = 1024;

/** A response carrying personal data in the body and in an allow-listed header. */
const personal = (padTo = 0): StoredResponse => ({
  status: 201,
  headers: [
    ['content-type', 'application/json'],
    ['location', LOCATION],
  ],
  body: enc.encode(JSON.stringify({ email: SECRET, pad: 'x'.repeat(padTo) })),
});

describe('aesGcmCipher', () => {
  it('rejects keys that are not 32 bytes, bad key ids and a current key id not configured', () => {
    assert.throws(() => aesGcmCipher({ keys: { k1: randomBytes(16) }, currentKeyId: 'k1' }), InvalidOptionError);
    assert.throws(() => aesGcmCipher({ keys: { k1: randomBytes(32).toString('base64').slice(4) }, currentKeyId: 'k1' }), InvalidOptionError);
    assert.throws(() => aesGcmCipher({ keys: { 'bad id': K1 }, currentKeyId: 'bad id' }), InvalidOptionError);
    assert.throws(() => aesGcmCipher({ keys: { k1: K1 }, currentKeyId: 'k2' }), InvalidOptionError);
  });

  it('accepts base64 keys; seals with a fresh IV each time; carries the key id, IV and tag', () => {
    const cipher = aesGcmCipher({ keys: { k1: K1.toString('base64') }, currentKeyId: 'k1' });
    const aad = responseAad('s', 'k', 'body');
    const a = cipher.seal(enc.encode('hello'), aad);
    const b = cipher.seal(enc.encode('hello'), aad);
    assert.notDeepEqual(a, b, 'two seals of one plaintext differ (random IV)');
    assert.equal(a.length, 2 + 2 + 12 + 16 + 5, 'version, id length, id "k1", 12-byte IV, 16-byte tag, ciphertext');
    assert.equal(Buffer.from(a.subarray(2, 4)).toString(), 'k1');
    assert.equal(new TextDecoder().decode(cipher.open(a, aad)), 'hello');
  });

  it('binds a sealed value to its scope, key and part', () => {
    const cipher = aesGcmCipher({ keys: { k1: K1 }, currentKeyId: 'k1' });
    const sealed = cipher.seal(enc.encode('hello'), responseAad('s', 'k', 'body'));
    assert.throws(() => cipher.open(sealed, responseAad('s', 'k2', 'body')), ResponseUnreadableError, 'another key');
    assert.throws(() => cipher.open(sealed, responseAad('s2', 'k', 'body')), ResponseUnreadableError, 'another scope');
    assert.throws(() => cipher.open(sealed, responseAad('s', 'k', 'headers')), ResponseUnreadableError, 'another part');
    // Length-prefixed fields: moving a character from scope to key is another row.
    assert.notDeepEqual(responseAad('ab', 'c', 'body'), responseAad('a', 'bc', 'body'));
  });
});

for (const engine of engines) {
  describe(`encryption at rest on ${engine.name}`, () => {
    const db = useEngine(engine);

    async function setup() {
      const fresh = await freshStore(db.client());
      db.cleanup(fresh.drop);
      const sql = (text: string, params?: unknown[]) => q(db.client()).query(text, params);
      const storeWith = (encryption?: EncryptionOptions) =>
        new PostgresStore({ client: db.client(), table: fresh.table, inlineMaxBytes: INLINE_MAX, ...(encryption ? { encryption } : {}) });
      const engineWith = (encryption?: EncryptionOptions) => new IdempotencyEngine({ store: storeWith(encryption), heartbeatMs: 0 });
      const write = async (idem: IdempotencyEngine, key: string, response: StoredResponse) => {
        const begun = await idem.begin({ scope: 's', key, fingerprint: fp(1) });
        assert.equal(begun.kind, 'execute', `a fresh key ${key}`);
        if (begun.kind === 'execute') await begun.execution.finish(response);
      };
      const replay = async (idem: IdempotencyEngine, key: string) => {
        const again = await idem.begin({ scope: 's', key, fingerprint: fp(1) });
        assert.equal(again.kind, 'replay', `key ${key} replays`);
        return (again as { response: StoredResponse }).response;
      };
      /** Everything stored for the table, rows and blobs, as text (bytea as hex and as escaped text). */
      const stored = async () => {
        const rows = (await sql(`SELECT t::text AS t, encode(response_body, 'escape') AS b FROM "${fresh.table}" t`)).rows;
        const blobs = (await sql(`SELECT t::text AS t, encode(body, 'escape') AS b FROM "${fresh.table}_blobs" t`)).rows;
        return [...rows, ...blobs].map((r) => `${String(r.t)}\n${String(r.b)}`).join('\n');
      };
      return { ...fresh, sql, storeWith, engineWith, write, replay, stored };
    }

    const K1_ONLY: EncryptionOptions = { keys: { k1: K1 }, currentKeyId: 'k1' };

    it('stores body and headers sealed, inline and out of line, and replays them exactly', async () => {
      const t = await setup();
      const idem = t.engineWith(K1_ONLY);
      const small = personal();
      const large = personal(5000);
      await t.write(idem, 'inline', small);
      await t.write(idem, 'blob', large);
      for (const [key, response] of [
        ['inline', small],
        ['blob', large],
      ] as const) {
        const got = await t.replay(idem, key);
        assert.equal(got.status, 201);
        assert.deepEqual(got.headers, response.headers, `${key}: headers`);
        assert.ok(Buffer.from(got.body).equals(Buffer.from(response.body)), `${key}: body byte-identical`);
      }
      const text = await t.stored();
      assert.ok(!text.includes(SECRET) && !text.includes('jane.doe'), 'the personal data appears nowhere in the rows or blobs');
      const rows = (await t.sql(`SELECT key, response_key_id, response_body_ref IS NOT NULL AS out_of_line FROM "${t.table}" ORDER BY key`)).rows;
      assert.deepEqual(
        rows.map((r) => [r.key, r.response_key_id, r.out_of_line]),
        [
          ['blob', 'k1', true],
          ['inline', 'k1', false],
        ],
        'each row names its key id; the large one is out of line',
      );
    });

    it('inspect names the key id and opens the sealed headers only with the key', async () => {
      const t = await setup();
      await t.write(t.engineWith(K1_ONLY), 'inline', personal());
      const withKey = await t.storeWith(K1_ONLY).inspect('s', 'inline');
      assert.equal(withKey?.response?.keyId, 'k1', 'the key id is reported');
      assert.deepEqual(withKey?.response?.headers, personal().headers, 'sealed headers opened with the configured key');
      const withoutKey = await t.storeWith().inspect('s', 'inline');
      assert.equal(withoutKey?.response?.keyId, 'k1', 'the key id is reported without the key too');
      assert.deepEqual(withoutKey?.response?.headers, [], 'without the key nothing of the sealed headers is shown');
    });

    it('refuses to replay with the wrong key under the same key id (ResponseUnreadableError)', async () => {
      const t = await setup();
      await t.write(t.engineWith(K1_ONLY), 'k', personal());
      await t.write(t.engineWith(K1_ONLY), 'big', personal(5000));
      const wrong = t.engineWith({ keys: { k1: K2 }, currentKeyId: 'k1' });
      await assert.rejects(wrong.begin({ scope: 's', key: 'k', fingerprint: fp(1) }), ResponseUnreadableError);
      await assert.rejects(wrong.begin({ scope: 's', key: 'big', fingerprint: fp(1) }), ResponseUnreadableError);
    });

    it('throws UnknownKeyIdError for a key id that is not configured, or when encryption is off', async () => {
      const t = await setup();
      await t.write(t.engineWith(K1_ONLY), 'k', personal());
      const other = t.engineWith({ keys: { k2: K2 }, currentKeyId: 'k2' });
      await assert.rejects(other.begin({ scope: 's', key: 'k', fingerprint: fp(1) }), (error: unknown) => {
        assert.ok(error instanceof UnknownKeyIdError, `UnknownKeyIdError, got ${String(error)}`);
        assert.equal(error.keyId, 'k1', 'names the missing key id');
        assert.equal(error.code, 'IDEM_UNKNOWN_KEY_ID');
        return true;
      });
      await assert.rejects(t.engineWith().begin({ scope: 's', key: 'k', fingerprint: fp(1) }), UnknownKeyIdError, 'never ciphertext replayed as plaintext');
      const mismatch = await other.begin({ scope: 's', key: 'k', fingerprint: fp(2) });
      assert.equal(mismatch.kind, 'mismatch', 'another request under the key is still a mismatch: nothing is decrypted for it');
    });

    it('detects a tampered ciphertext, inline and in the blob, body and headers', async () => {
      const t = await setup();
      const idem = t.engineWith(K1_ONLY);
      await t.write(idem, 'inline', personal());
      await t.write(idem, 'blob', personal(5000));
      await t.write(idem, 'headers', personal());
      // Flip one bit of the last ciphertext byte.
      const flipLast = (column: string) => `overlay(${column} placing set_byte(substring(${column} from octet_length(${column}) for 1), 0,
        get_byte(${column}, octet_length(${column}) - 1) # 1) from octet_length(${column}) for 1)`;
      await t.sql(`UPDATE "${t.table}" SET response_body = ${flipLast('response_body')} WHERE key = 'inline'`);
      await t.sql(`UPDATE "${t.table}_blobs" SET body = ${flipLast('body')} WHERE key = 'blob'`);
      // Headers: a sealed base64 string; replace one base64 character in the middle.
      const h = String((await t.sql(`SELECT response_headers #>> '{}' AS h FROM "${t.table}" WHERE key = 'headers'`)).rows[0]!.h);
      const i = Math.floor(h.length / 2);
      const tampered = h.slice(0, i) + (h[i] === 'A' ? 'B' : 'A') + h.slice(i + 1);
      await t.sql(`UPDATE "${t.table}" SET response_headers = to_jsonb($1::text) WHERE key = 'headers'`, [tampered]);
      for (const key of ['inline', 'blob', 'headers']) {
        await assert.rejects(idem.begin({ scope: 's', key, fingerprint: fp(1) }), ResponseUnreadableError, `${key} tampered`);
      }
    });

    it('refuses a ciphertext copied from another row (AAD binds scope and key)', async () => {
      const t = await setup();
      const idem = t.engineWith(K1_ONLY);
      await t.write(idem, 'alice', personal());
      await t.write(idem, 'bob', { status: 200, headers: [['content-type', 'text/plain']], body: enc.encode('bob') });
      await t.write(idem, 'alice-big', personal(5000));
      await t.write(idem, 'bob-big', personal(6000));
      // Swap whole stored responses (headers and body) between rows.
      await t.sql(`UPDATE "${t.table}" b SET response_body = a.response_body, response_headers = a.response_headers
        FROM "${t.table}" a WHERE a.key = 'alice' AND b.key = 'bob'`);
      await t.sql(`UPDATE "${t.table}_blobs" b SET body = a.body FROM "${t.table}_blobs" a WHERE a.key = 'alice-big' AND b.key = 'bob-big'`);
      await t.sql(`UPDATE "${t.table}" b SET response_headers = a.response_headers FROM "${t.table}" a WHERE a.key = 'alice-big' AND b.key = 'bob-big'`);
      await assert.rejects(idem.begin({ scope: 's', key: 'bob', fingerprint: fp(1) }), ResponseUnreadableError, 'inline swap');
      await assert.rejects(idem.begin({ scope: 's', key: 'bob-big', fingerprint: fp(1) }), ResponseUnreadableError, 'blob swap');
      // Same key, another scope: copy alice's row to scope s2 with the same key.
      await t.sql(`INSERT INTO "${t.table}" (scope, key, fingerprint, state, recovery_point, response_status, response_headers, response_body, response_key_id)
        SELECT 's2', key, fingerprint, state, recovery_point, response_status, response_headers, response_body, response_key_id FROM "${t.table}" WHERE key = 'alice'`);
      await assert.rejects(idem.begin({ scope: 's2', key: 'alice', fingerprint: fp(1) }), ResponseUnreadableError, 'another scope');
      const alice = await t.replay(idem, 'alice');
      assert.ok(new TextDecoder().decode(alice.body).includes(SECRET), 'the original row still replays');
    });

    it('rotates keys: new writes use the current key, old rows replay with theirs until the key is removed', async () => {
      const t = await setup();
      await t.write(t.engineWith(K1_ONLY), 'old', personal());
      await t.write(t.engineWith(K1_ONLY), 'old-big', personal(5000));
      const rotated = t.engineWith({ keys: { k1: K1, k2: K2 }, currentKeyId: 'k2' });
      await t.write(rotated, 'new', personal());
      const ids = (await t.sql(`SELECT key, response_key_id FROM "${t.table}" ORDER BY key`)).rows.map((r) => `${String(r.key)}:${String(r.response_key_id)}`);
      assert.deepEqual(ids, ['new:k2', 'old:k1', 'old-big:k1']);
      for (const key of ['old', 'old-big', 'new']) {
        assert.ok(new TextDecoder().decode((await t.replay(rotated, key)).body).includes(SECRET), `${key} replays after rotation`);
      }
      const k2Only = t.engineWith({ keys: { k2: K2 }, currentKeyId: 'k2' });
      assert.ok(new TextDecoder().decode((await t.replay(k2Only, 'new')).body).includes(SECRET), 'the new row needs only k2');
      await assert.rejects(k2Only.begin({ scope: 's', key: 'old', fingerprint: fp(1) }), UnknownKeyIdError, 'k1 removed: old rows fail loudly');
    });

    it('still replays plaintext rows written before encryption was turned on', async () => {
      const t = await setup();
      await t.write(t.engineWith(), 'plain', personal());
      await t.write(t.engineWith(), 'plain-big', personal(5000));
      const idem = t.engineWith(K1_ONLY);
      for (const key of ['plain', 'plain-big']) {
        const got = await t.replay(idem, key);
        assert.deepEqual(got.headers, personal().headers, `${key}: headers`);
        assert.ok(new TextDecoder().decode(got.body).includes(SECRET), `${key}: body`);
      }
    });
  });
}
