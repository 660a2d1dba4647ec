/**
 * What a framework module of the response-shape contract provides: its rows (answered with the
 * framework's own API, or absent with the reason), and a way to start the app with idem in
 * front or plain.
 */
import type { IdempotencyOptions } from '../../../src/http/idempotency.js';
import type { ShapeName } from './shapes.js';

/** Sends one request to a started app. */
export type ShapeSend = (path: string, init: RequestInit) => Promise<Response>;

/** One framework (or one platform of it) in the contract. */
export interface ShapeApp {
  name: string;
  /** Rows this framework has no way to answer, each with the reason the docs table shows. */
  absent: Partial<Record<ShapeName, string>>;
  /**
   * Starts the app answering every row at `shapePath(row)`: behind idem with `options`, plain
   * (the same handlers, no idem) without. Servers it starts are closed by `cleanup`.
   */
  start(options: IdempotencyOptions<unknown> | undefined, cleanup: (fn: () => Promise<void>) => void): Promise<ShapeSend>;
}

/** The request headers a row's handler reads: its idempotency key and whether to break its body. */
export function rowHeaders(get: (name: string) => string | string[] | null | undefined): { key: string | undefined; fail: boolean } {
  const first = (v: string | string[] | null | undefined) => (Array.isArray(v) ? v[0] : (v ?? undefined));
  return { key: first(get('idempotency-key')), fail: first(get('x-break')) === '1' };
}
