/**
 * The one place the key header's name is worked out (H4): `keyHeader`, else its deprecated
 * alias `headerName`, else `Idempotency-Key`. Every adapter reads the key through the core,
 * which resolves the name here, so the alias works on every adapter.
 */
import { DEFAULT_KEY_HEADER } from '../core/constants.js';

/** The options that name the key header. */
export interface KeyHeaderOptions {
  keyHeader?: string | undefined;
  headerName?: string | undefined;
}

/** The key header's name as configured (case as given). */
export function resolveKeyHeader(options: KeyHeaderOptions): string {
  return options.keyHeader ?? options.headerName ?? DEFAULT_KEY_HEADER;
}
