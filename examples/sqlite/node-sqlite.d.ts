/**
 * The slice of `node:sqlite` (built into Node 22.13+ and 24) this example uses. The repository
 * type-checks against @types/node 20, which predates the module; an app on @types/node 22+ has
 * these types already and does not need this file.
 */
declare module 'node:sqlite' {
  export interface StatementSync {
    all(...params: unknown[]): unknown[];
    run(...params: unknown[]): { changes: number | bigint; lastInsertRowid: number | bigint };
  }
  export class DatabaseSync {
    constructor(path: string, options?: { timeout?: number });
    prepare(sql: string): StatementSync;
    exec(sql: string): void;
    close(): void;
  }
}
