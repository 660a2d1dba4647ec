/**
 * DynamoDbStore entries for the store contract and the attempt contract: each backend (one
 * `describe`) starts an emulator (test/helpers/dynamodb.ts) and each `fresh()` creates a table
 * of its own. The backdoors are plain item writes on the same client; a phase's effect is one
 * `Put` added to the commit's `TransactWriteItems` (the effect items live in the same table
 * under `pk = effect#…`). `clockSkewMs: 0`: one process writes every lease here.
 */
import { GetItemCommand, QueryCommand, ScanCommand, UpdateItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DynamoDbStore, type DynamoDbStoreOptions, type DynamoDbTx, type Item } from '../../src/dynamodb/index.js';
import { tableName } from './engines.js';
import type { KeyRow } from './http.js';
import type { StoreFactory, StoreHarness } from './stores.js';
import { createKeyTable, dropKeyTable, type DynamoDbEmulator } from './dynamodb.js';

const pkOf = (scope: string, key: string) => `${scope.length}:${scope}:${key}`;

export async function scanAll(client: DynamoDBClient, table: string): Promise<Item[]> {
  const items: Item[] = [];
  let start: Item | undefined;
  do {
    const out = await client.send(new ScanCommand({ TableName: table, ConsistentRead: true, ...(start ? { ExclusiveStartKey: start } : {}) }));
    items.push(...((out.Items ?? []) as Item[]));
    start = out.LastEvaluatedKey as Item | undefined;
  } while (start);
  return items;
}

const plain = (item: Item | undefined) =>
  item && JSON.parse(JSON.stringify(item, (_k, v: unknown) => (v instanceof Uint8Array ? Buffer.from(v).toString('hex') : v)));

/** A fresh table with the harness backdoors, on `emulator`'s client. */
export async function dynamoDbHarness(emulator: DynamoDbEmulator, options: Partial<DynamoDbStoreOptions> = {}): Promise<StoreHarness<DynamoDbTx>> {
  const { client } = emulator;
  const table = tableName();
  await createKeyTable(client, table);
  const store = new DynamoDbStore({ clockSkewMs: 0, ...options, client, table });
  let seq = 0;
  const key = (scope: string, k: string) => ({ pk: { S: pkOf(scope, k) }, sk: { S: 'key' } });
  const item = async (scope: string, k: string) =>
    (await client.send(new GetItemCommand({ TableName: table, Key: key(scope, k), ConsistentRead: true }))).Item as Item | undefined;
  const keyItems = async () => (await scanAll(client, table)).filter((i) => (i.sk as { S: string }).S === 'key');
  const harness: StoreHarness<DynamoDbTx> = {
    store,
    effect: (note) => async (tx) => {
      const n = String(++seq).padStart(8, '0');
      tx.write({ Put: { TableName: tx.table, Item: { pk: { S: `effect#${n}` }, sk: { S: 'effect' }, note: { S: note } } } });
      return { note };
    },
    effects: async () =>
      (await scanAll(client, table))
        .filter((i) => (i.sk as { S: string }).S === 'effect')
        .sort((a, b) => ((a.pk as { S: string }).S < (b.pk as { S: string }).S ? -1 : 1))
        .map((i) => (i.note as { S: string }).S),
    async age(scope, k, ms) {
      const found = await item(scope, k);
      if (!found) return;
      const lu = found.lu as { N: string } | undefined;
      await client.send(
        new UpdateItemCommand({
          TableName: table,
          Key: key(scope, k),
          UpdateExpression: lu ? 'SET ca = ca - :ms, lu = lu - :ms' : 'SET ca = ca - :ms',
          ExpressionAttributeValues: { ':ms': { N: String(ms) } },
        }),
      );
    },
    async setLease(scope, k, ms) {
      await client.send(
        new UpdateItemCommand({
          TableName: table,
          Key: key(scope, k),
          UpdateExpression: 'SET lu = :lu',
          ExpressionAttributeValues: { ':lu': { N: String(Date.now() + ms) } },
        }),
      );
    },
    async tokenOf(scope, k) {
      const found = await item(scope, k);
      return found ? Number((found.tok as { N: string }).N) : undefined;
    },
    async snapshot(scope, k) {
      // The key item and its chunks, every page (a Query page holds at most 1 MB).
      const items: Item[] = [];
      let startKey: Item | undefined;
      do {
        const page = await client.send(
          new QueryCommand({
            TableName: table,
            ConsistentRead: true,
            KeyConditionExpression: 'pk = :pk',
            ExpressionAttributeValues: { ':pk': { S: pkOf(scope, k) } },
            ...(startKey ? { ExclusiveStartKey: startKey } : {}),
          }),
        );
        items.push(...((page.Items ?? []) as Item[]));
        startKey = page.LastEvaluatedKey as Item | undefined;
      } while (startKey);
      return plain(items as unknown as Item);
    },
    count: async () => (await keyItems()).length,
    async staleInTx(_tx, scope, k) {
      // Another worker's takeover, committed while this commit's effects run (before its transaction is sent).
      await client.send(
        new UpdateItemCommand({
          TableName: table,
          Key: key(scope, k),
          UpdateExpression: 'SET tok = tok + :one',
          ExpressionAttributeValues: { ':one': { N: '1' } },
        }),
      );
    },
    dump: async () => (await scanAll(client, table)).map((i) => JSON.stringify(plain(i))).join('\n'),
    async rows() {
      const rows: KeyRow[] = (await keyItems()).map((i) => {
        const p = plain(i) as Record<string, Record<string, string>>;
        return {
          scope: p.sc!.S!,
          key: p.ky!.S!,
          state: p.st!.S!,
          recovery_point: p.rp?.S ?? 'start',
          lock_version: p.tok!.N!,
          fingerprint: p.fp?.B ?? '',
          response_status: p.rs ? Number(p.rs.N) : null,
          response_body: p.rb?.B ?? (p.rs ? '' : null),
          response_headers: p.rh ? (JSON.parse(p.rh.S!) as unknown) : null,
          locked: p.lu !== undefined && Number(p.lu.N) > Date.now(),
        };
      });
      return rows.sort((a, b) => (a.scope + '\0' + a.key < b.scope + '\0' + b.key ? -1 : 1));
    },
    drop: () => dropKeyTable(client, table),
  };
  return harness;
}

/** The DynamoDB store on an emulator started for each backend. */
export function dynamoDbFactory(name: string, start: () => Promise<DynamoDbEmulator>): StoreFactory {
  return {
    name,
    capabilities: { sweep: false, partitioned: false, sql: false, virtualTime: false, sentWhole: true },
    contractOnly: true,
    async connect() {
      const emulator = await start();
      return { fresh: () => dynamoDbHarness(emulator) as Promise<StoreHarness>, close: () => emulator.stop() };
    },
  };
}
