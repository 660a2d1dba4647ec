/**
 * The completer's list on DynamoDB (protocol.md K12-K13, K53 6): `started` keys within retention
 * whose lease ended at least `graceMs` ago, found by a `Scan` of the table (DynamoDB has no
 * query by lease end without an index of the user's), oldest lease end first. A pass reads the
 * whole table: run the completer on a period the table's read capacity affords.
 */
import { ScanCommand } from '@aws-sdk/client-dynamodb';
import { KeyState } from '../core/constants.js';
import { decodeSnapshot } from '../store/records.js';
import type { AbandonedKey } from '../store/types.js';
import { type DynamoDbClientLike, type Item, send } from './client.js';
import { A, KEY_SK, num, readNum, readStr, str, toRecord } from './items.js';

/** What the list needs of the store. */
export interface ScanContext {
  client: DynamoDbClientLike;
  table: string;
  now: number;
  skewMs: number;
}

/** The lease end as a taker sees it: a released lease at its end, any other `skewMs` later (K53 2). */
const leaseEnd = (item: Item, skewMs: number): number => {
  const lu = readNum(item, A.lockedUntil) ?? Number.NEGATIVE_INFINITY;
  return (item[A.released] as { BOOL?: boolean } | undefined)?.BOOL === true ? lu : lu + skewMs;
};

/** Lists up to `limit` abandoned keys (see IdempotencyStore.listAbandoned). */
export async function listAbandoned(ctx: ScanContext, options: { limit: number; graceMs: number; retentionMs: number }): Promise<AbandonedKey[]> {
  const graceMs = Math.max(0, Math.floor(options.graceMs));
  const cut = ctx.now - graceMs;
  const found: Item[] = [];
  let start: Item | undefined;
  do {
    const out = (await send(
      ctx.client,
      new ScanCommand({
        TableName: ctx.table,
        ConsistentRead: true,
        FilterExpression: `sk = :key AND ${A.state} = :started AND ${A.createdAt} > :created AND (attribute_not_exists(${A.lockedUntil}) OR ${A.lockedUntil} <= :cut OR (${A.released} = :true AND ${A.lockedUntil} <= :cutReleased))`,
        ExpressionAttributeValues: {
          ':key': str(KEY_SK),
          ':started': str(KeyState.Started),
          ':created': num(ctx.now - options.retentionMs),
          ':cut': num(cut - ctx.skewMs),
          ':cutReleased': num(cut),
          ':true': { BOOL: true },
        },
        ...(start ? { ExclusiveStartKey: start } : {}),
      }),
    )) as { Items?: Item[]; LastEvaluatedKey?: Item };
    found.push(...(out.Items ?? []));
    start = out.LastEvaluatedKey;
  } while (start);
  found.sort((a, b) => leaseEnd(a, ctx.skewMs) - leaseEnd(b, ctx.skewMs));
  return found.slice(0, Math.max(0, options.limit)).map((item) => {
    const abandoned: AbandonedKey = { record: toRecord(item, readStr(item, A.scope) ?? '', readStr(item, A.key) ?? '', ctx.now, ctx.skewMs) };
    const request = readStr(item, A.request);
    const snapshot = request === undefined ? undefined : decodeSnapshot(JSON.parse(request));
    if (snapshot) abandoned.request = snapshot;
    return abandoned;
  });
}
