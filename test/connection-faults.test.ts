/**
 * The connection-fault contract (issue 24 item 1) over every client of
 * test/contracts/connection-faults/entries.ts: a socket destroyed mid-statement and
 * mid-transaction, the server killed, a black hole and an idle spell behind a dead link. The
 * service runs as a child process; it must never exit, answer 503 with Retry-After within
 * storeTimeoutMs + 1 s, and recover once the server is back. Entries are skipped without their
 * server's environment variable (DATABASE_URL, REDIS_URL).
 */
import { connectionFaultContract } from './contracts/connection-faults/contract.js';
import { faultEntries } from './contracts/connection-faults/entries.js';

connectionFaultContract(faultEntries);
