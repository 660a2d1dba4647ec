/**
 * The response-shape contract's table (docs/response-shapes.md, protocol.md H23): every way a
 * framework lets a handler answer, one row each, and what the client must get. Each framework
 * module (./apps-*.ts) answers each row with the framework's own API, with idem in front and
 * without it, or names why it has no such shape; ./contract.ts runs the rows.
 */
import { Readable } from 'node:stream';
import type { IdempotencyContext } from '../../../src/http/context.js';

/** What a row promises. */
export type Expect =
  /** The first client gets the plain framework's status and bytes; every replay the same bytes. */
  | 'stored'
  /** The body breaks before any phase: 500 problem, key released, the retry runs fresh. */
  | 'fails-before-phase'
  /** The body breaks after a phase committed: 500 problem, key resumable, the retry skips the phase. */
  | 'fails-after-phase'
  /** idem refuses the shape with a clear error: 500 problem naming it, nothing stored, key released. */
  | 'refused'
  /** Not protected (HEAD): the plain framework's answer, nothing stored. */
  | 'passthrough';

/** One row of the table. */
export interface Shape {
  name: string;
  /** What the handler does, in words (the docs table's column). */
  does: string;
  expect: Expect;
  /** The request method (default POST). */
  method?: string;
}

export const SHAPES = [
  { name: 'buffer', does: 'a Buffer body, 201 text/csv', expect: 'stored' },
  { name: 'string', does: 'a string body, 201 text/plain', expect: 'stored' },
  { name: 'uint8array', does: 'a Uint8Array body (0x00 0xff …), 201', expect: 'stored' },
  { name: 'json', does: "the framework's JSON answer of an object, 201", expect: 'stored' },
  { name: 'stream of buffers', does: 'a Node Readable of Buffers', expect: 'stored' },
  { name: 'stream of strings', does: "a Node Readable of strings (Readable.from(['a','b']))", expect: 'stored' },
  { name: 'async iterable', does: 'an async generator of chunks', expect: 'stored' },
  { name: 'web stream', does: 'a web ReadableStream', expect: 'stored' },
  { name: '204', does: '204 No Content', expect: 'stored' },
  { name: '304', does: '304 Not Modified with an ETag', expect: 'stored' },
  { name: 'HEAD', does: 'a HEAD request with a key (HEAD is not protected: H1)', expect: 'passthrough', method: 'HEAD' },
  { name: 'file', does: 'sendFile / StreamableFile / a file stream', expect: 'stored' },
  { name: 'observable', does: 'a Nest handler returning an Observable', expect: 'stored' },
  { name: 'send without return', does: 'Fastify: reply.code(201).send(obj) in an async handler, not returned', expect: 'stored' },
  { name: 'return reply', does: 'Fastify: return reply.code(201).send(obj)', expect: 'stored' },
  { name: 'node writes', does: "writeHead + write + end on the framework's Node response", expect: 'stored' },
  { name: 'hijack', does: 'taking the socket from the framework (reply.hijack(), ctx.respond = false)', expect: 'refused' },
  { name: 'stream errors before a phase', does: 'the body stream fails after its first chunk, no phase run', expect: 'fails-before-phase' },
  {
    name: 'piped stream errors',
    does: 'pipeline(stream, res) after a phase; the stream fails after its first chunk and pipeline destroys the response',
    expect: 'fails-after-phase',
  },
  { name: 'stream errors after a phase', does: 'a phase commits, then the body stream fails after its first chunk', expect: 'fails-after-phase' },
] as const satisfies readonly Shape[];

export type ShapeName = (typeof SHAPES)[number]['name'];

/** The URL path of a row: `/shape/<name>` with the name's spaces as dashes. */
export const shapePath = (name: ShapeName): string => `/shape/${name.replaceAll(' ', '-')}`;

/** The row a path names (the apps route by it). */
export function shapeOf(path: string): ShapeName | undefined {
  const slug = path.split('?')[0]!.split('/shape/')[1];
  return SHAPES.find((shape) => shape.name.replaceAll(' ', '-') === slug)?.name;
}

/** The text the text rows answer, in the chunks the stream rows send it in. */
export const CHUNKS = ['receipt,ch_1\n', 'amount,42\n', 'status,paid\n'] as const;
export const TEXT = CHUNKS.join('');
/** The bytes of the binary row: not UTF-8, with a NUL. */
export const BYTES = Uint8Array.from([0x00, 0xff, 0x10, 0x80, 0x7f, 0xc3]);
/** The object of the JSON rows. */
export const OBJECT = { id: 'ch_1', amount: 42, note: 'café' };

/** How many times each key's phase ran (across attempts), for the resumable rows. */
export const phaseRuns = new Map<string, number>();

/** Header a test sets on the first attempt of a failing row: the body breaks only then (headers are not fingerprinted, H7). */
export const BREAK = 'x-break';

/**
 * The charge a real handler makes before it answers: a phase under idem, a plain call without
 * (`ctx` undefined). Counted per idempotency key in {@link phaseRuns}.
 */
export async function charge(ctx: IdempotencyContext<unknown> | undefined, key: string | null | undefined): Promise<string> {
  const run = async () => {
    phaseRuns.set(key ?? '', (phaseRuns.get(key ?? '') ?? 0) + 1);
    return 'ch_1';
  };
  return ctx ? ctx.phase('charge', run) : run();
}

/** The text chunks as an async generator; with `fail`, it throws after the first chunk. */
export async function* chunks(fail = false): AsyncGenerator<string> {
  for (const [i, chunk] of CHUNKS.entries()) {
    if (fail && i === 1) throw new Error('the disk went away mid-file');
    yield chunk;
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** A Node Readable of Buffers (of strings with `strings`), failing after its first chunk with `fail`. */
export function nodeStream(options: { fail?: boolean; strings?: boolean } = {}): Readable {
  const source = chunks(options.fail);
  if (options.strings) return Readable.from(source);
  return Readable.from(
    (async function* () {
      for await (const chunk of source) yield Buffer.from(chunk);
    })(),
  );
}

/** A web ReadableStream of the text chunks as bytes, failing after its first chunk with `fail`. */
export function webStream(fail = false): ReadableStream<Uint8Array> {
  const source = chunks(fail);
  const encoder = new TextEncoder();
  return new ReadableStream({
    async pull(controller) {
      const next = await source.next();
      if (next.done) controller.close();
      else controller.enqueue(encoder.encode(next.value));
    },
  });
}
