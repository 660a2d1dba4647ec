/** What the HTTP core decides for a request before its handler runs, and the held-response forms adapters on Node's response use. */
import type { StoredResponse } from '../store/types.js';
import type { IdempotencyContext } from './context.js';

/** Outcome of `HttpIdempotency.prepare`. */
export type Prepared<Tx = unknown> =
  /** Not protected (method, or no key and not required): run the handler as usual. */
  | { kind: 'pass' }
  /**
   * Answer without running the handler: a replay or one of idem's problems. For a replay,
   * `replayed` is the stored response (adapters on Node's response write it directly, see
   * `replayHeaders`); `response` is then built when first read.
   */
  | { kind: 'respond'; response: Response; replayed?: StoredResponse }
  /** Run the handler with `context`, then send what `complete` (or, on a throw, `fail`) returns. */
  | {
      kind: 'execute';
      context: IdempotencyContext<Tx>;
      complete(response: Response): Promise<Response>;
      /**
       * `complete` for a response held as parts on the server's own response object (adapters
       * on Node's response): the same outcome, without building a web Response when the held
       * response is recorded as it is. {@link SendHeld} means "send the held response, with
       * these headers added"; a Response replaces it.
       */
      completeHeld(held: HeldResponse): Promise<Response | SendHeld>;
      fail(error: unknown): Promise<Response>;
    };

/** A response the handler wrote, held on the server's response object (status, headers as Node keeps them, body bytes). */
export interface HeldResponse {
  status: number;
  /** Lower-case names; a repeated header is an array (Node's `getHeaders()`). */
  headers: Readonly<Record<string, string | number | readonly string[] | undefined>>;
  body: Uint8Array;
}

/** Send the held response as it is, with `headers` set on it (the expiry header, protocol.md H40). */
export interface SendHeld {
  kind: 'send-held';
  headers: Array<[string, string]>;
}
