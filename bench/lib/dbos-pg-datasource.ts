/**
 * A DBOS Transact 5.x transactional data source on a node-postgres pool, for the DBOS bench.
 *
 * DBOS publishes its data sources as separate packages (Knex, Drizzle, Prisma, postgres.js),
 * all at 4.x on npm while the SDK is at 5.3.0, whose data source contract changed (the Knex one
 * fails at start). This implements the SDK's public `DataSourceTransactionHandler` contract
 * as its documentation in `@dbos-inc/dbos-sdk/datasource` states it: before a transaction,
 * look up its recorded outcome and replay it; otherwise run the function in a transaction, insert
 * the step's checkpoint into `dbos.transaction_completion` in the SAME transaction, check that
 * this execution still owns the workflow, and commit. So the business write and DBOS's
 * checkpoint commit together, as they do with DBOS's own data sources.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { DBOS } from '@dbos-inc/dbos-sdk';
import {
  assertStillOwnsWorkflow,
  type DataSourceTransactionHandler,
  DBOSStepAlreadyRecordedError,
  initializeDataSourceSchemaPG,
  isPGKeyConflictError,
  isPGRetriableTransactionError,
  registerDataSource,
  registerTransaction,
  replayRecordedStep,
} from '@dbos-inc/dbos-sdk/datasource';
import type pg from 'pg';

const current = new AsyncLocalStorage<pg.PoolClient>();

/** The data source; register transactions with {@link PgDataSource.registerTransaction}. */
export class PgDataSource implements DataSourceTransactionHandler {
  constructor(
    readonly name: string,
    private readonly pool: pg.Pool,
  ) {
    registerDataSource(this);
  }

  /** The transaction's connection, inside a registered transaction. */
  static get client(): pg.PoolClient {
    const client = current.getStore();
    if (!client) throw new Error('PgDataSource.client outside a DBOS transaction');
    return client;
  }

  registerTransaction<Args extends unknown[], Return>(func: (...args: Args) => Promise<Return>, name: string): (...args: Args) => Promise<Return> {
    return registerTransaction(this.name, func, { name });
  }

  async initialize(): Promise<void> {
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      await initializeDataSourceSchemaPG(async (sql) => (await client.query(sql)).rows, 'dbos');
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    } finally {
      client.release();
    }
  }

  async destroy(): Promise<void> {}

  async invokeTransactionFunction<This, Args extends unknown[], Return>(
    _config: unknown,
    target: This,
    func: (this: This, ...args: Args) => Promise<Return>,
    ...args: Args
  ): Promise<Return> {
    const workflowID = DBOS.workflowID;
    const stepID = DBOS.stepID;
    const save = workflowID !== undefined && stepID !== undefined;
    for (let waitMs = 1; ; waitMs = Math.min(waitMs * 2, 1000)) {
      if (save) {
        const recorded = (
          await this.pool.query('SELECT output, error FROM dbos.transaction_completion WHERE workflow_id = $1 AND function_num = $2', [workflowID, stepID])
        ).rows[0];
        if (recorded) return replayRecordedStep<Return>(recorded);
      }
      const client = await this.pool.connect();
      try {
        await client.query('BEGIN');
        const result = await current.run(client, () => func.call(target, ...args));
        if (save) {
          try {
            // SuperJSON's form of a plain JSON value, which replayRecordedStep parses.
            await client.query('INSERT INTO dbos.transaction_completion (workflow_id, function_num, output) VALUES ($1, $2, $3)', [
              workflowID,
              stepID,
              JSON.stringify({ json: result ?? null }),
            ]);
          } catch (error) {
            throw isPGKeyConflictError(error) ? new DBOSStepAlreadyRecordedError(workflowID, stepID) : error;
          }
          await assertStillOwnsWorkflow(workflowID);
        }
        await client.query('COMMIT');
        return result;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        // A concurrent execution recorded this step first: loop to replay its outcome.
        if (error instanceof DBOSStepAlreadyRecordedError) continue;
        if (isPGRetriableTransactionError(error)) {
          await new Promise((resolve) => setTimeout(resolve, waitMs));
          continue;
        }
        throw error;
      } finally {
        client.release();
      }
    }
  }
}
