/**
 * The DynamoDB store (protocol.md K53): one key item per (scope, key), every write after the
 * claim a conditional write on the fencing token, a phase's effects in one `TransactWriteItems`
 * with its recovery point, large responses as chunk items, retention checked on every read and
 * the TTL attribute `exp` left to delete what retention ended.
 */
import { randomUUID } from 'node:crypto';
import { DeleteItemCommand, GetItemCommand, PutItemCommand, TransactWriteItemsCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { KeyState, RECOVERY_POINT_FINISHED, RECOVERY_POINT_START } from '../core/constants.js';
import { InvalidOptionError } from '../core/errors.js';
import { encodeSnapshot } from '../store/records.js';
import type {
  AbandonedKey,
  ClaimInput,
  ClaimResult,
  CommitRecord,
  Fenced,
  IdempotencyStore,
  KeyRecord,
  KeyRef,
  OperatorWrite,
  RequestSnapshot,
  StoreCapabilities,
  TakeOverResult,
} from '../store/types.js';
import { conditionFailed, type DynamoDbClientLike, type Item, send, TRANSACTION_CANCELED, type TransactWriteItem } from './client.js';
import { A, keyOf, LEASE_OVER, leaseOver, num, partitionKey, readNum, readPhaseResults, readStr, retentionOver, str, toRecord } from './items.js';
import type { DynamoDbStoreOptions, DynamoDbTx } from './options.js';
import { listAbandoned } from './completion.js';
import { CHUNK_BYTES, deleteChunks, readResponse, responseAttributes, writeChunks } from './response.js';

export type { DynamoDbStoreOptions, DynamoDbTx } from './options.js';

/** The condition of every write after the claim (protocol.md K8): this token, still started. */
const FENCE = `${A.token} = :t AND ${A.state} = :started`;

/** An `UpdateItem` input, as the SDK and a transaction's `Update` take it. */
interface UpdateInput {
  TableName: string;
  Key: Item;
  UpdateExpression: string;
  ConditionExpression: string;
  ExpressionAttributeValues: Item;
  ExpressionAttributeNames?: Record<string, string>;
}

/** One update of the key item: its expression and values, fenced by `condition`. */
interface Update {
  set: string[];
  remove?: string[];
  names?: Record<string, string>;
  values: Item;
  condition: string;
}

/**
 * The idempotency store on DynamoDB (`idem/dynamodb`), on the user's `DynamoDBClient`.
 *
 * @example
 * ```ts
 * import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
 * import { DynamoDbStore } from 'idem/dynamodb';
 * const store = new DynamoDbStore({ client: new DynamoDBClient({}), table: 'idempotency_keys' });
 * ```
 */
export class DynamoDbStore implements IdempotencyStore<DynamoDbTx> {
  /**
   * Beyond the core (protocol.md K48): the completer (its list is a table scan, K53 6) and
   * operator release and forget. No `notify` (DynamoDB has no notification but Streams, which
   * Lambda reads), no batches, no table to migrate or sweep (the table is infrastructure; TTL
   * deletes).
   */
  readonly capabilities: StoreCapabilities = { completion: true, operator: true };
  readonly noSubscribe = 'DynamoDB cannot notify a waiting duplicate (no LISTEN, no pub/sub)';
  readonly table: string;
  private readonly client: DynamoDbClientLike;
  private readonly skewMs: number;
  private readonly inlineMaxBytes: number;
  private readonly clock: () => number;
  private lastToken = 0;

  /** @throws {InvalidOptionError} for a missing client or table, or an option out of range */
  constructor(options: DynamoDbStoreOptions) {
    if (!options || typeof options.client?.send !== 'function') throw new InvalidOptionError('DynamoDbStore: client must be a DynamoDBClient');
    if (typeof options.table !== 'string' || !/^[A-Za-z0-9_.-]{3,255}$/.test(options.table)) {
      throw new InvalidOptionError('DynamoDbStore: table must be a DynamoDB table name (3-255 of A-Z a-z 0-9 _ . -)');
    }
    const skew = options.clockSkewMs ?? 1000;
    if (!(Number.isFinite(skew) && skew >= 0)) throw new InvalidOptionError('DynamoDbStore: clockSkewMs must be a number of ms >= 0');
    const inline = options.inlineMaxBytes ?? 300_000;
    if (!(Number.isInteger(inline) && inline >= 0 && inline <= CHUNK_BYTES))
      throw new InvalidOptionError(`DynamoDbStore: inlineMaxBytes must be an integer 0-${CHUNK_BYTES}`);
    if (options.clock !== undefined && typeof options.clock !== 'function')
      throw new InvalidOptionError('DynamoDbStore: clock must be a function returning epoch ms');
    this.client = options.client;
    this.table = options.table;
    this.skewMs = skew;
    this.inlineMaxBytes = inline;
    this.clock = options.clock ?? Date.now;
  }

  async claim(input: ClaimInput): Promise<ClaimResult> {
    for (;;) {
      const now = this.clock();
      const token = this.nextToken(0);
      const claimId = randomUUID();
      // protocol.md K53 1: the claim is one conditional PutItem; the condition is the uniqueness.
      const item = this.freshItem(input, now, token, claimId);
      const put = await this.put(item, 'attribute_not_exists(pk)', {});
      if (put === true) return this.claimed(token, claimId, input.retentionMs);
      // The refused put returns the item it met (ALL_OLD): a replay is one round trip. An
      // emulator without ReturnValuesOnConditionCheckFailure (dynalite) costs a read more.
      const existing = put ?? (await this.read(input.scope, input.key));
      if (!existing) continue; // deleted between the put and the read: claim again
      if (!(retentionOver(existing, input.retentionMs, now) && leaseOver(existing, now, this.skewMs))) {
        return { kind: 'exists', record: await this.record(existing, input, now) };
      }
      // protocol.md K6: past retention and no live lease counts as absent; replaced by a
      // compare-and-set on the token read, with a token above it.
      const old = readNum(existing, A.token) ?? 0;
      const next = this.nextToken(old);
      const fresh = this.freshItem(input, now, next, claimId);
      if ((await this.put(fresh, `${A.token} = :old AND ${LEASE_OVER}`, { ':old': num(old), ...this.times(now) })) === true) {
        if (readNum(existing, A.chunks) !== undefined) await this.dropChunks(input.scope, input.key, readNum(existing, A.chunkToken) ?? 0);
        return this.claimed(next, claimId, input.retentionMs);
      }
    }
  }

  async takeOver(ref: KeyRef, leaseMs: number): Promise<TakeOverResult> {
    const item = await this.read(ref.scope, ref.key);
    const now = this.clock();
    if (!item || readNum(item, A.token) !== ref.token || readStr(item, A.state) !== KeyState.Started || !leaseOver(item, now, this.skewMs))
      return { kind: 'lost' };
    // protocol.md K23: a lease that ran out unreleased was a crash and counts; the read's
    // released flag is part of the compare-and-set, so the count is decided on the item as read.
    const released = (item[A.released] as { BOOL?: boolean } | undefined)?.BOOL === true;
    const token = this.nextToken(ref.token);
    const out = await this.update(ref, {
      set: [`${A.token} = :n`, `${A.lockedUntil} = :lu`, `${A.released} = :false`, `${A.failedAttempts} = if_not_exists(${A.failedAttempts}, :zero) + :inc`],
      values: {
        ':n': num(token),
        ':lu': num(now + leaseMs),
        ':false': { BOOL: false },
        ':zero': num(0),
        ':inc': num(released ? 0 : 1),
        ':rel': { BOOL: released },
        ...this.times(now),
      },
      condition: `${FENCE} AND ${LEASE_OVER} AND ${released ? `${A.released} = :rel` : `(attribute_not_exists(${A.released}) OR ${A.released} = :rel)`}`,
    });
    if (!out) return { kind: 'lost' };
    return {
      kind: 'taken',
      token,
      claimId: readStr(out, A.claimId) ?? '',
      recoveryPoint: readStr(out, A.recoveryPoint) ?? RECOVERY_POINT_START,
      phaseResults: readPhaseResults(out),
      failedAttempts: readNum(out, A.failedAttempts) ?? 0,
    };
  }

  commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects: (tx: DynamoDbTx) => Promise<T>): Promise<Fenced<T>>;
  commit(ref: KeyRef, record: (value: undefined) => CommitRecord): Promise<Fenced>;
  async commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects?: (tx: DynamoDbTx) => Promise<T>): Promise<Fenced<T>> {
    const writes: TransactWriteItem[] = [];
    const tx: DynamoDbTx = { table: this.table, write: (w) => void writes.push(w) };
    // Nothing is sent before the effects return: a throw here leaves no trace (protocol.md K4).
    const value = effects ? await effects(tx) : (undefined as T);
    const rec = record(value);
    if (writes.length > 99) throw new InvalidOptionError(`idem/dynamodb: a phase may write at most 99 items with its recovery point, got ${writes.length}`);
    const now = this.clock();
    let update: Update;
    let chunked = false;
    if (rec.kind === 'phase') {
      // One attribute of the results map per phase: no read before the write.
      update = {
        set: [`${A.recoveryPoint} = :rp`, `${A.phaseResults}.#phase = :pr`, `${A.lockedUntil} = :lu`],
        names: { '#phase': rec.phase },
        values: { ':rp': str(rec.phase), ':pr': str(JSON.stringify(rec.result ?? null)), ':lu': num(now + rec.leaseMs) },
        condition: FENCE,
      };
    } else {
      const attrs = responseAttributes(rec.response, ref.token, this.inlineMaxBytes);
      chunked = attrs[A.chunks] !== undefined;
      // The chunks go first, under this token: the key item never points at unwritten chunks.
      if (chunked) await writeChunks(this.client, this.table, partitionKey(ref.scope, ref.key), ref.token, rec.response.body, await this.ttlOf(ref));
      const values: Item = { ':done': str(KeyState.Done), ':fin': str(RECOVERY_POINT_FINISHED), ':at': num(now) };
      const set = [`${A.state} = :done`, `${A.recoveryPoint} = :fin`, `${A.finishedAt} = :at`];
      for (const [name, v] of Object.entries(attrs)) {
        set.push(`${name} = :r_${name}`);
        values[`:r_${name}`] = v;
      }
      update = { set, remove: [A.lockedUntil], values, condition: FENCE };
    }
    const ok = writes.length === 0 ? (await this.update(ref, update)) !== undefined : await this.transact(ref, update, writes);
    if (!ok) {
      if (chunked) await this.dropChunks(ref.scope, ref.key, ref.token);
      return { kind: 'fenced' };
    }
    return { kind: 'ok', value };
  }

  async extendLease(ref: KeyRef, leaseMs: number): Promise<Fenced> {
    return this.fenced(
      await this.update(ref, { set: [`${A.lockedUntil} = :lu`], values: { ':lu': num(this.clock() + leaseMs) }, condition: FENCE }),
      undefined,
    );
  }

  async release(ref: KeyRef): Promise<Fenced<'released'>> {
    // The lease ends now and is marked released: the next takeover is at once and counts no crash (K10, K23).
    const out = await this.update(ref, {
      set: [`${A.lockedUntil} = :lu`, `${A.released} = :true`],
      values: { ':lu': num(this.clock()), ':true': { BOOL: true } },
      condition: FENCE,
    });
    return this.fenced(out, 'released' as const);
  }

  async discard(ref: KeyRef): Promise<Fenced<'deleted' | 'released'>> {
    try {
      await send(
        this.client,
        new DeleteItemCommand({
          TableName: this.table,
          Key: keyOf(ref.scope, ref.key),
          ConditionExpression: `${FENCE} AND ${A.recoveryPoint} = :start`,
          ExpressionAttributeValues: { ':t': num(ref.token), ':started': str(KeyState.Started), ':start': str(RECOVERY_POINT_START) },
        }),
      );
      return { kind: 'ok', value: 'deleted' };
    } catch (error) {
      if (!conditionFailed(error)) throw error;
    }
    // A committed phase (or a stale token): never deleted, released when the token is current (K10).
    return this.release(ref);
  }

  async countFailure(ref: KeyRef): Promise<Fenced<number>> {
    const out = await this.update(ref, {
      set: [`${A.failedAttempts} = if_not_exists(${A.failedAttempts}, :zero) + :one`],
      values: { ':zero': num(0), ':one': num(1) },
      condition: FENCE,
    });
    return out ? { kind: 'ok', value: readNum(out, A.failedAttempts) ?? 0 } : { kind: 'fenced' };
  }

  async get(scope: string, key: string, retentionMs: number): Promise<KeyRecord | undefined> {
    const item = await this.read(scope, key);
    const now = this.clock();
    // TTL deletion is lazy (hours to days): retention is judged here, on every read (K53 5).
    if (!item || retentionOver(item, retentionMs, now)) return undefined;
    return this.record(item, { scope, key, retentionMs }, now);
  }

  async operate(write: OperatorWrite): Promise<Fenced<{ token: number }>> {
    const { ref } = write;
    const now = this.clock();
    const token = this.nextToken(ref.token);
    const values: Item = { ':n': num(token), ':lu': num(now), ':true': { BOOL: true }, ':note': str(write.note) };
    const set = [`${A.token} = :n`, `${A.lockedUntil} = :lu`, `${A.released} = :true`, `${A.operatorNote} = :note`];
    let update: Update;
    if (write.action === 'release') {
      // protocol.md K41: a valid lease only with force; the holder is fenced by the new token.
      update = write.force ? { set, values, condition: FENCE } : { set, values: { ...values, ...this.times(now) }, condition: `${FENCE} AND ${LEASE_OVER}` };
    } else {
      // protocol.md K42: a finished key becomes a released claim at `start` with nothing stored.
      Object.assign(values, {
        ':done': str(KeyState.Done),
        ':st': str(KeyState.Started),
        ':rp': str(RECOVERY_POINT_START),
        ':pr': { M: {} },
        ':cid': str(randomUUID()),
        ':zero': num(0),
      });
      set.push(`${A.state} = :st`, `${A.recoveryPoint} = :rp`, `${A.phaseResults} = :pr`, `${A.claimId} = :cid`, `${A.failedAttempts} = :zero`);
      update = {
        set,
        remove: [A.status, A.headers, A.body, A.chunks, A.chunkToken, A.finishedAt, A.request],
        values,
        condition: `${A.token} = :t AND ${A.state} = :done`,
      };
    }
    const old = write.action === 'forget' ? await this.read(ref.scope, ref.key) : undefined;
    const out = await this.update(ref, update, write.action === 'forget');
    if (!out) return { kind: 'fenced' };
    if (old && readNum(old, A.chunks) !== undefined) await this.dropChunks(ref.scope, ref.key, readNum(old, A.chunkToken) ?? 0);
    return { kind: 'ok', value: { token } };
  }

  async saveRequest(ref: KeyRef, request: RequestSnapshot): Promise<Fenced> {
    // Kept in the key item: a snapshot counts toward its 400 KB (the body in base64).
    return this.fenced(await this.update(ref, { set: [`${A.request} = :rq`], values: { ':rq': str(encodeSnapshot(request)) }, condition: FENCE }), undefined);
  }

  listAbandoned(options: { limit: number; graceMs: number; retentionMs: number }): Promise<AbandonedKey[]> {
    return listAbandoned({ client: this.client, table: this.table, now: this.clock(), skewMs: this.skewMs }, options);
  }

  async discardAbandoned(ref: KeyRef): Promise<Fenced> {
    // One conditional delete: still as listed (token, started, at start, no snapshot, lease over).
    try {
      await send(
        this.client,
        new DeleteItemCommand({
          TableName: this.table,
          Key: keyOf(ref.scope, ref.key),
          ConditionExpression: `${FENCE} AND ${A.recoveryPoint} = :start AND attribute_not_exists(${A.request}) AND ${LEASE_OVER}`,
          ExpressionAttributeValues: {
            ':t': num(ref.token),
            ':started': str(KeyState.Started),
            ':start': str(RECOVERY_POINT_START),
            ...this.times(this.clock()),
          },
        }),
      );
      return { kind: 'ok', value: undefined };
    } catch (error) {
      if (conditionFailed(error)) return { kind: 'fenced' };
      throw error;
    }
  }

  /**
   * Tokens (protocol.md K53 1): above `floor` (the item's token) and above every token this
   * process drew, from the clock (ms × 1000) so that a fresh item after a delete starts above
   * the deleted one's tokens while hosts' clocks agree.
   */
  private nextToken(floor: number): number {
    this.lastToken = Math.max(this.lastToken + 1, floor + 1, this.clock() * 1000);
    return this.lastToken;
  }

  private claimed(token: number, claimId: string, retentionMs: number): ClaimResult {
    // An injected clock is not real time: the replay cache (K20) then caches nothing.
    if (this.clock !== Date.now) return { kind: 'claimed', token, claimId };
    return { kind: 'claimed', token, claimId, retentionRemainingMs: Math.max(0, retentionMs - this.skewMs) };
  }

  /**
   * A fresh key item. The TTL attribute `exp` (epoch s) is the claim plus twice the retention:
   * the engine keeps retention above any lease's life (K7), and a takeover happens only within
   * retention, so no live lease is ever deleted by TTL (K53 5).
   */
  private freshItem(input: ClaimInput, now: number, token: number, claimId: string): Item {
    return {
      ...keyOf(input.scope, input.key),
      [A.scope]: str(input.scope),
      [A.key]: str(input.key),
      [A.state]: str(KeyState.Started),
      [A.fingerprint]: { B: input.fingerprint },
      [A.recoveryPoint]: str(RECOVERY_POINT_START),
      [A.phaseResults]: { M: {} },
      [A.token]: num(token),
      [A.claimId]: str(claimId),
      [A.lockedUntil]: num(now + input.leaseMs),
      [A.failedAttempts]: num(0),
      [A.createdAt]: num(now),
      [A.retainUntil]: num(now + input.retentionMs),
      exp: num(Math.ceil((now + 2 * input.retentionMs) / 1000)),
    };
  }

  private times(now: number): Item {
    return { ':now': num(now), ':nowSkew': num(now - this.skewMs), ':true': { BOOL: true } };
  }

  private async record(item: Item, input: { scope: string; key: string; retentionMs: number; fingerprint?: Uint8Array }, now: number): Promise<KeyRecord> {
    const record = toRecord(item, input.scope, input.key, now, this.skewMs);
    if (this.clock === Date.now) record.retentionRemainingMs = (readNum(item, A.createdAt) ?? 0) + input.retentionMs - now - this.skewMs;
    const mismatch = input.fingerprint !== undefined && Buffer.compare(Buffer.from(input.fingerprint), Buffer.from(record.fingerprint)) !== 0;
    if (record.state === KeyState.Done && !mismatch) record.response = await readResponse(this.client, this.table, input.scope, input.key, item);
    return record;
  }

  private async read(scope: string, key: string): Promise<Item | undefined> {
    const out = (await send(this.client, new GetItemCommand({ TableName: this.table, Key: keyOf(scope, key), ConsistentRead: true }))) as { Item?: Item };
    return out.Item;
  }

  private async ttlOf(ref: KeyRef): Promise<number> {
    const item = await this.read(ref.scope, ref.key);
    return item ? (readNum(item, 'exp') ?? 0) : 0;
  }

  /** `true` when written; when the condition refused it, the item it met, if the server returned it. */
  private async put(item: Item, condition: string, values: Item): Promise<true | Item | undefined> {
    try {
      const hasValues = Object.keys(values).length > 0;
      await send(
        this.client,
        new PutItemCommand({
          TableName: this.table,
          Item: item,
          ConditionExpression: condition,
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          ...(hasValues ? { ExpressionAttributeValues: values } : {}),
        }),
      );
      return true;
    } catch (error) {
      if (conditionFailed(error)) return (error as { Item?: Item }).Item;
      throw error;
    }
  }

  private updateInput(ref: KeyRef, u: Update, done = false): UpdateInput {
    const expression = `SET ${u.set.join(', ')}${u.remove?.length ? ` REMOVE ${u.remove.join(', ')}` : ''}`;
    const values: Item = { ':t': num(ref.token), ...(done ? {} : { ':started': str(KeyState.Started) }), ...u.values };
    const input: UpdateInput = {
      TableName: this.table,
      Key: keyOf(ref.scope, ref.key),
      UpdateExpression: expression,
      ConditionExpression: u.condition,
      ExpressionAttributeValues: values,
    };
    if (u.names) input.ExpressionAttributeNames = u.names;
    return input;
  }

  /** One fenced update; the item after it, or `undefined` when the condition refused it. */
  private async update(ref: KeyRef, u: Update, done = false): Promise<Item | undefined> {
    try {
      const out = (await send(this.client, new UpdateItemCommand({ ...this.updateInput(ref, u, done), ReturnValues: 'ALL_NEW' }))) as { Attributes?: Item };
      return out.Attributes ?? {};
    } catch (error) {
      if (conditionFailed(error)) return undefined;
      throw error;
    }
  }

  /** The effects' writes and the fenced update in ONE transaction (K53 3): false when the fence refused it. */
  private async transact(ref: KeyRef, u: Update, writes: TransactWriteItem[]): Promise<boolean> {
    try {
      await send(this.client, new TransactWriteItemsCommand({ TransactItems: [...writes, { Update: this.updateInput(ref, u) }] }));
      return true;
    } catch (error) {
      const e = error as { name?: string; CancellationReasons?: Array<{ Code?: string }> };
      // Only the key item's own refusal is "fenced"; an effect's refused condition is the effect's error.
      if (e.name === TRANSACTION_CANCELED && e.CancellationReasons?.[writes.length]?.Code === 'ConditionalCheckFailed') return false;
      throw error;
    }
  }

  private async dropChunks(scope: string, key: string, token: number): Promise<void> {
    await deleteChunks(this.client, this.table, partitionKey(scope, key), token).catch(() => undefined);
  }

  private fenced<V>(out: Item | undefined, value: V): Fenced<V> {
    return out ? { kind: 'ok', value } : { kind: 'fenced' };
  }
}
