/**
 * The one export of the workerd module `cloudflare:workers` that object.ts uses, for type-checking
 * this repository without `@cloudflare/workers-types`. Applications get the real declaration from
 * `wrangler types` or `@cloudflare/workers-types`.
 */
declare module 'cloudflare:workers' {
  export abstract class DurableObject<Env = unknown> {
    protected ctx: unknown;
    protected env: Env;
    constructor(ctx: unknown, env: Env);
    alarm?(): void | Promise<void>;
  }
}
