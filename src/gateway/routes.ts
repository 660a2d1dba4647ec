/**
 * The gateway's routes: each configured route is one `HttpIdempotency` (the same HTTP core the
 * framework adapters use) over the gateway's one engine, so a claimed request gets exactly the
 * library's answers (replay, 422, 409 + Retry-After, problem+json, the 5xx rules).
 */
import { DEFAULT_REPLAY_HEADERS } from '../core/constants.js';
import type { IdempotencyEngine } from '../engine/engine.js';
import { HttpIdempotency } from '../http/idempotency.js';
import type { ProblemFormat } from '../http/problem.js';
import type { GatewayConfig, RouteConfig } from './config.js';
import { principalScope } from './principal.js';

/** A route ready to serve. */
export interface GatewayRoute {
  config: RouteConfig;
  core: HttpIdempotency;
  maxBodyBytes: number;
}

/** Builds the routes of `config` on `engine`. @throws {InvalidOptionError} for options the HTTP core refuses */
export function buildRoutes(config: GatewayConfig, engine: IdempotencyEngine, problems: ProblemFormat): GatewayRoute[] {
  return config.routes.map((route) => {
    const scope = principalScope(route.principal ?? 'none');
    const core = new HttpIdempotency({
      engine,
      methods: route.methods,
      required: route.required,
      scope,
      fingerprintHeaders: route.fingerprintHeaders,
      fingerprintIgnore: route.fingerprintIgnore,
      replayHeaders: config.replayHeaders.length > 0 ? [...DEFAULT_REPLAY_HEADERS, ...config.replayHeaders] : undefined,
      mismatchStatus: config.mismatchStatus,
      maxResponseBytes: config.maxResponseBytes,
      problems,
      onHandlerError: () => undefined, // the gateway logs upstream faults itself
    });
    return { config: route, core, maxBodyBytes: route.maxBodyBytes ?? config.maxBodyBytes };
  });
}

/** The first route whose path pattern matches `path` (exact, or a prefix ending in `*`) and that claims `method`. */
export function matchRoute(routes: readonly GatewayRoute[], method: string, path: string): GatewayRoute | undefined {
  for (const route of routes) {
    const pattern = route.config.path;
    const hit = pattern.endsWith('*') ? path.startsWith(pattern.slice(0, -1)) : path === pattern;
    if (hit && route.core.protects(method)) return route;
  }
  return undefined;
}
