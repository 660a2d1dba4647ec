export { MySqlStore, type MySqlStoreOptions } from './store.js';
export {
  MYSQL_DRIVER,
  isMySqlDriver,
  type MySqlDriver,
  type MySqlPoolLike,
  type MySqlConnectionLike,
  type MySqlQueryOptions,
  type MySqlResultHeader,
} from './client.js';
export { drizzleMySql, type DrizzleMySqlLike } from './drizzle.js';
export { StoreTimeoutError } from '../store/deadline.js';
export { kyselyMySql, type KyselyMySqlLike } from './kysely.js';
