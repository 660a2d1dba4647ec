// Test-only route of the adapter contract suite (test/helpers/harness-next.ts): the test
// process starts this app in process and registers, per harness app id, the idem options
// and the route under test; this file wraps them with withIdempotency as compiled by Next.
import type { NextRequest } from 'next/server.js';
import { withIdempotency, type IdempotencyContext, type IdempotencyOptions } from 'idem/next';

type Params = { params: Promise<{ id: string; path?: string[] }> };

/** One harness app, registered by the test process on globalThis. */
interface HarnessEntry {
  options: IdempotencyOptions<unknown>;
  route(request: Request, idem: IdempotencyContext<unknown> | undefined): Promise<Response>;
  handler?: (request: NextRequest, ctx: Params) => Promise<Response>;
}

const REGISTRY = Symbol.for('idem.next.harness');

async function dispatch(request: NextRequest, ctx: Params): Promise<Response> {
  const { id } = await ctx.params;
  const entry = (globalThis as { [REGISTRY]?: Map<string, HarnessEntry> })[REGISTRY]?.get(id);
  if (!entry) return new Response(`no harness app ${id}`, { status: 404 });
  entry.handler ??= withIdempotency<unknown, NextRequest, Params>(entry.options, (req, _ctx, idem) => entry.route(req, idem));
  return entry.handler(request, ctx);
}

export const dynamic = 'force-dynamic';
export const GET = dispatch;
export const POST = dispatch;
export const PUT = dispatch;
export const PATCH = dispatch;
export const DELETE = dispatch;
