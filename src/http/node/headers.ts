/** Node's headers as fetch `Headers`, shared by the adapters on Node's request and response. */
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders } from 'node:http';

/** Node's header object (request or response; repeated names as arrays) as fetch `Headers`. */
export function toHeaders(
  source: IncomingHttpHeaders | OutgoingHttpHeaders | Readonly<Record<string, string | number | readonly string[] | undefined>>,
): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(source)) {
    if (Array.isArray(value)) for (const v of value) headers.append(name, v);
    else if (value !== undefined) headers.set(name, String(value));
  }
  return headers;
}

/** The lines of the key header on a Node request (repeated lines kept apart, H4); `field` is the core's `keyHeaderField`. */
export function keyHeaderLines(req: IncomingMessage, field: string): string[] | undefined {
  return (req.headersDistinct as Record<string, string[] | undefined> | undefined)?.[field];
}
