/**
 * Reading a request body with a limit (protocol.md H27): the bytes are counted as they arrive
 * and the stream is cancelled past `maxBytes`, so a client cannot make the process buffer more
 * than the limit; a `Content-Length` over it is refused before anything is read.
 */
import { concat } from './response.js';

/** The body's bytes (`null` for none), or `undefined` when it is larger than `maxBytes`. */
export async function readBodyWithin(request: Request, maxBytes: number): Promise<Uint8Array | null | undefined> {
  if (!request.body) return null;
  const declared = Number(request.headers.get('content-length'));
  if (Number.isFinite(declared) && declared > maxBytes) {
    await request.body.cancel().catch(() => undefined);
    return undefined;
  }
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel().catch(() => undefined);
      return undefined;
    }
    chunks.push(value);
  }
  return concat(chunks, size);
}
