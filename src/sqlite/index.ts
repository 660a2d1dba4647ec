export { SqliteStore, type SqliteStoreOptions } from './store.js';
export type {
  LibsqlClientLike,
  LibsqlExecutorLike,
  LibsqlResultSetLike,
  LibsqlTransactionLike,
  LibsqlValue,
  SqliteClient,
  SqliteDatabaseLike,
  SqliteStatementLike,
  SqliteTxOf,
} from './client.js';
export { StoreTimeoutError } from '../store/deadline.js';
