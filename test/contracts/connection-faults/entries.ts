/**
 * The table of clients the connection-fault contract runs over (./entry.ts): one entry per
 * client idem accepts. A client is added here with one line.
 */
import type { FaultEntry } from './entry.js';
import { postgresEntries } from './postgres-entries.js';
import { redisEntries } from './redis-entries.js';
import { mysqlEntries } from './mysql-entries.js';

export const faultEntries: FaultEntry[] = [...postgresEntries, ...redisEntries, ...mysqlEntries];
