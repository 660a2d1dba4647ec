/**
 * What the SQLite store and the D1 store (protocol.md K51, K57) do the same way on the one key
 * table: each write after the claim as ONE statement fenced by the token in its WHERE (K8), the
 * reads of a key and of abandoned keys, and wait mode by polling (K17: neither can notify).
 * Each store hands it the way it runs one statement on its own.
 */
import type { ResponseCipher } from '../core/cipher.js';
import { KeyChangeHub } from '../store/key-changes.js';
import { PollingFeed, type PollSettings } from '../store/polling-feed.js';
import { decodeSnapshot, encodeSnapshot } from '../store/records.js';
import type { AbandonedKey, Fenced, KeyChanges, KeyRecord, KeyRef, RequestSnapshot } from '../store/types.js';
import type { SqliteRow } from './client.js';
import { ms, type SqliteRowsContext } from './context.js';
import { readRecord, retentionExpired } from './rows.js';

const OK: Fenced = { kind: 'ok', value: undefined };
const FENCED = { kind: 'fenced' } as const;

/** The fenced writes, reads and polling of one key table; see the module comment. */
export class SqliteKeyWrites {
  private hub: KeyChangeHub | undefined;

  constructor(
    private readonly ctx: SqliteRowsContext,
    private readonly cipher: ResponseCipher | undefined,
    private readonly poll: PollSettings,
  ) {}

  /** A fenced statement on its own: its `RETURNING` row, or undefined when fenced. */
  private async fenced(sql: string, ref: KeyRef, before: unknown[] = []): Promise<SqliteRow | undefined> {
    return (await this.ctx.db.rows(sql, [...before, ref.scope, ref.key, ref.token]))[0];
  }

  async extendLease(ref: KeyRef, leaseMs: number): Promise<Fenced> {
    return (await this.fenced(this.ctx.sql.extendLease, ref, [ms(leaseMs)])) ? OK : FENCED;
  }

  async release(ref: KeyRef): Promise<Fenced<'released'>> {
    return (await this.fenced(this.ctx.sql.release, ref)) ? { kind: 'ok', value: 'released' } : FENCED;
  }

  async countFailure(ref: KeyRef): Promise<Fenced<number>> {
    const row = await this.fenced(this.ctx.sql.countFailure, ref);
    return row ? { kind: 'ok', value: Number(row.failed_attempts) } : FENCED;
  }

  /** protocol.md K10: deleted while no phase committed, else released. */
  async discard(ref: KeyRef): Promise<Fenced<'deleted' | 'released'>> {
    if (await this.fenced(this.ctx.sql.discard, ref)) return { kind: 'ok', value: 'deleted' };
    return this.release(ref);
  }

  /** The record, or undefined when absent or past retention (protocol.md K6). */
  async get(scope: string, key: string, retentionMs: number): Promise<KeyRecord | undefined> {
    const row = (await this.ctx.db.rows(this.ctx.sql.read, [ms(retentionMs), ms(retentionMs), scope, key]))[0];
    if (!row || retentionExpired(row)) return undefined;
    return readRecord(this.cipher, row, scope, key);
  }

  async saveRequest(ref: KeyRef, request: RequestSnapshot): Promise<Fenced> {
    return (await this.fenced(this.ctx.sql.saveRequest, ref, [encodeSnapshot(request)])) ? OK : FENCED;
  }

  async discardAbandoned(ref: KeyRef): Promise<Fenced> {
    return (await this.fenced(this.ctx.sql.discardAbandoned, ref)) ? OK : FENCED;
  }

  async listAbandoned(options: { limit: number; graceMs: number; retentionMs: number }): Promise<AbandonedKey[]> {
    const ret = ms(options.retentionMs);
    const rows = await this.ctx.db.rows(this.ctx.sql.listAbandoned, [ret, ret, ms(Math.max(0, options.graceMs)), ret, options.limit]);
    return rows.map((row) => {
      const abandoned: AbandonedKey = { record: readRecord(this.cipher, row, String(row.scope), String(row.key)) };
      const request = row.request === null || row.request === undefined ? undefined : decodeSnapshot(JSON.parse(String(row.request)));
      if (request) abandoned.request = request;
      return abandoned;
    });
  }

  /**
   * Wait mode by polling (protocol.md K17): a key a duplicate of this process waits for is read
   * again every poll interval. Resolves once the first read is done.
   */
  subscribe(scope: string, key: string): Promise<KeyChanges> {
    if (!this.hub) {
      const feed = new PollingFeed(async (s, k) => {
        const row = (await this.ctx.db.rows(this.ctx.sql.pollKey, [s, k]))[0];
        return row ? `${String(row.lock_version)}|${String(row.state)}|${String(row.released)}|${String(row.locked_until)}` : 'gone';
      }, this.poll);
      this.hub = new KeyChangeHub(feed, 0);
      feed.hub = this.hub;
    }
    return this.hub.subscribe(scope, key);
  }
}
