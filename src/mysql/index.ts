export { MySqlStore, type MySqlStoreOptions } from './store.js';
export type { MySqlPoolLike, MySqlConnectionLike, MySqlQueryOptions, MySqlResultHeader } from './client.js';
export { StoreTimeoutError } from '../store/deadline.js';
