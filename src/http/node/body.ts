/** A Node request's body as bytes, shared by the adapters on Node's request (Express, Koa, NestJS). */
import type { IncomingMessage } from 'node:http';

/** Reads the request stream whole (`null` when something consumed it and kept nothing). */
export async function readRequest(req: IncomingMessage): Promise<Buffer | null> {
  if (req.readableEnded) return null;
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/**
 * A body parser's result as bytes (`null` for none): bytes and text as they are; a parsed
 * value as its JSON, which the fingerprint canonicalises the same way as the raw JSON (RFC 8785
 * over the parsed value), the same on every retry since the same parser runs.
 */
export function parsedBytes(parsed: unknown): Uint8Array | null {
  if (parsed === undefined || parsed === null) return null;
  if (parsed instanceof Uint8Array) return parsed.length > 0 ? parsed : null;
  if (typeof parsed === 'string') return parsed.length > 0 ? Buffer.from(parsed) : null;
  return Buffer.from(JSON.stringify(parsed));
}

/** A parsed value (not bytes, not text): the fingerprint then reads the body as JSON. */
export function isParsedObject(parsed: unknown): boolean {
  return parsed !== undefined && parsed !== null && typeof parsed === 'object' && !(parsed instanceof Uint8Array);
}
