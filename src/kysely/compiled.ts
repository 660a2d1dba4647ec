/**
 * A raw compiled Kysely query, made without importing Kysely: shared by idem/kysely's driver on
 * PostgreSQL and idem/mysql's `kyselyMySql`, so neither store's Kysely glue imports the other store.
 */

/**
 * A compiled query as Kysely's `CompiledQuery.raw(sql, parameters)` makes it (Kysely's public
 * `CompiledQuery` interface: the text, its parameters, a raw operation node and a query id).
 */
export interface KyselyCompiledQuery {
  readonly sql: string;
  readonly parameters: ReadonlyArray<unknown>;
  readonly query: { readonly kind: 'RawNode'; readonly sqlFragments: ReadonlyArray<string>; readonly parameters: ReadonlyArray<never> };
  readonly queryId: { readonly queryId: string };
}

/** What Kysely's `executeQuery` resolves to (`QueryResult`). */
export interface KyselyQueryResult {
  readonly rows: ReadonlyArray<unknown>;
  /** Set for INSERT, UPDATE, DELETE and MERGE. */
  readonly numAffectedRows?: bigint;
}

let queries = 0;

/** `CompiledQuery.raw(text, params)` without importing Kysely (also idem/mysql's `kyselyMySql`). @internal */
export function compiled(text: string, params: unknown[] | undefined): KyselyCompiledQuery {
  return {
    sql: text,
    parameters: params ?? [],
    query: { kind: 'RawNode', sqlFragments: [text], parameters: [] },
    queryId: { queryId: `idem-${++queries}` },
  };
}
