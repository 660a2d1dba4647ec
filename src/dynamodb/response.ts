/**
 * A stored response on DynamoDB (protocol.md K53 4): inline in the key item up to
 * `inlineMaxBytes`, else chunk items of at most {@link CHUNK_BYTES} beside it, written BEFORE the
 * fenced finish under the finishing token, so the key item never points at chunks that were not
 * written (the rule of an external blob store, K14); a fenced finish deletes its chunks, and
 * chunks orphaned by a crash carry the key's TTL.
 */
import { BatchWriteItemCommand, PutItemCommand, QueryCommand } from '@aws-sdk/client-dynamodb';
import { ResponseUnreadableError } from '../core/errors.js';
import type { StoredResponse } from '../store/types.js';
import { type DynamoDbClientLike, type Item, send } from './client.js';
import { A, chunkPrefix, chunkSk, num, partitionKey, readBytes, readNum, readStr, str } from './items.js';

/** Body bytes per chunk item: under DynamoDB's 400 KB item limit with room for the key and names. */
export const CHUNK_BYTES = 350_000;

/** The attributes of a finish: status and headers always, the body inline or as a chunk count. */
export function responseAttributes(response: StoredResponse, token: number, inlineMaxBytes: number): Item {
  const attrs: Item = { [A.status]: num(response.status), [A.headers]: str(JSON.stringify(response.headers)) };
  if (response.body.byteLength > inlineMaxBytes) {
    attrs[A.chunks] = num(Math.ceil(response.body.byteLength / CHUNK_BYTES));
    attrs[A.chunkToken] = num(token);
  } else if (response.body.byteLength > 0) attrs[A.body] = { B: response.body };
  return attrs;
}

/** Writes the chunks of `body` (when it needs them) under `token`, each with the key's TTL. */
export async function writeChunks(client: DynamoDbClientLike, table: string, pk: string, token: number, body: Uint8Array, exp: number): Promise<void> {
  const n = Math.ceil(body.byteLength / CHUNK_BYTES);
  await Promise.all(
    Array.from({ length: n }, (_, i) =>
      send(
        client,
        new PutItemCommand({
          TableName: table,
          Item: { pk: str(pk), sk: str(chunkSk(token, i)), b: { B: body.subarray(i * CHUNK_BYTES, (i + 1) * CHUNK_BYTES) }, exp: num(exp) },
        }),
      ),
    ),
  );
}

/** The sort keys of the chunks stored under `token`, in order. */
async function chunkKeys(client: DynamoDbClientLike, table: string, pk: string, token: number, withBytes: boolean): Promise<Item[]> {
  const items: Item[] = [];
  let start: Item | undefined;
  do {
    const out = (await send(
      client,
      new QueryCommand({
        TableName: table,
        ConsistentRead: true,
        KeyConditionExpression: 'pk = :pk AND begins_with(sk, :prefix)',
        ExpressionAttributeValues: { ':pk': str(pk), ':prefix': str(chunkPrefix(token)) },
        ...(withBytes ? {} : { ProjectionExpression: 'pk, sk' }),
        ...(start ? { ExclusiveStartKey: start } : {}),
      }),
    )) as { Items?: Item[]; LastEvaluatedKey?: Item };
    items.push(...(out.Items ?? []));
    start = out.LastEvaluatedKey;
  } while (start);
  return items;
}

/** Deletes the chunks written under `token` (a fenced finish, a forget, a replacement): best effort, TTL is the backstop. */
export async function deleteChunks(client: DynamoDbClientLike, table: string, pk: string, token: number): Promise<void> {
  const keys = await chunkKeys(client, table, pk, token, false);
  for (let i = 0; i < keys.length; i += 25) {
    const batch = keys.slice(i, i + 25).map((Key) => ({ DeleteRequest: { Key } }));
    await send(client, new BatchWriteItemCommand({ RequestItems: { [table]: batch } }));
  }
}

/** The response a finished key item holds, its chunks read back byte for byte. */
export async function readResponse(client: DynamoDbClientLike, table: string, scope: string, key: string, item: Item): Promise<StoredResponse> {
  const status = readNum(item, A.status) ?? 0;
  const headers = JSON.parse(readStr(item, A.headers) ?? '[]') as Array<[string, string]>;
  const count = readNum(item, A.chunks);
  if (count === undefined) return { status, headers, body: readBytes(item, A.body) ?? new Uint8Array() };
  const chunks = await chunkKeys(client, table, partitionKey(scope, key), readNum(item, A.chunkToken) ?? 0, true);
  // A missing chunk is never replayed as a shorter body (protocol.md K14).
  if (chunks.length !== count) throw new ResponseUnreadableError(`idem/dynamodb: ${chunks.length} of ${count} response chunks found for key ${key}`);
  const parts = chunks.map((c) => readBytes(c, 'b') ?? new Uint8Array());
  const body = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const p of parts) {
    body.set(p, at);
    at += p.byteLength;
  }
  return { status, headers, body };
}
