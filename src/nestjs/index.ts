/**
 * NestJS 11 module: `IdempotencyModule.forRoot / forRootAsync`, the `@Idempotent()` decorator
 * (metadata + {@link IdempotencyInterceptor}) and the `@IdemContext()` parameter decorator, on
 * the Express and the Fastify platform. Uses no decorator syntax and needs no
 * `emitDecoratorMetadata`: every injection names its token.
 *
 * @example
 * ```ts
 * import { IdempotencyModule, Idempotent, IdemContext, type IdempotencyContext } from 'idem/nestjs';
 * @Module({ imports: [IdempotencyModule.forRoot({ store, required: true })], controllers: [ChargesController] })
 * class AppModule {}
 * // in ChargesController:
 * @Post('charges') @Idempotent()
 * create(@Body() body: Charge, @IdemContext() idem: IdempotencyContext<Queryable>) {
 *   return idem.phase('charge_created', (tx) => insertCharge(tx, body));
 * }
 * // main.ts: NestFactory.create(AppModule, { rawBody: true })
 * ```
 */
import {
  applyDecorators,
  createParamDecorator,
  Module,
  SetMetadata,
  UseInterceptors,
  type DynamicModule,
  type ExecutionContext,
  type InjectionToken,
  type ModuleMetadata,
  type OptionalFactoryDependency,
  type Provider,
} from '@nestjs/common';
import { HttpIdempotency, type IdempotencyOptions } from '../http/idempotency.js';
import {
  CONTEXT_PROPERTY,
  IDEMPOTENCY,
  IDEMPOTENCY_OPTIONS,
  IDEMPOTENCY_STORE,
  IDEMPOTENT_METADATA,
  IdempotencyInterceptor,
  type RouteIdempotencyOptions,
} from './interceptor.js';

/** Options of `forRootAsync`: a factory for the options, with what it injects. */
export interface IdempotencyModuleAsyncOptions<Tx = unknown> extends Pick<ModuleMetadata, 'imports'> {
  /** Tokens whose providers are passed to `useFactory`, e.g. a database service. */
  inject?: Array<InjectionToken | OptionalFactoryDependency>;
  /** Returns the options, e.g. `{ store: new PostgresStore({ client: db.pool }) }`. */
  useFactory: (...args: never[]) => IdempotencyOptions<Tx> | Promise<IdempotencyOptions<Tx>>;
}

/**
 * The module. Global: import it once (in the root module); `@Idempotent()` then works in
 * every module, and `IDEMPOTENCY_STORE` / `IDEMPOTENCY` can be injected anywhere.
 */
export class IdempotencyModule {
  /**
   * @param options the core's options (`store` or `engine`, `required`, ...), shared by every
   *   `@Idempotent()` route
   * @throws {InvalidOptionError} while the app starts, for bad options
   */
  static forRoot<Tx = unknown>(options: IdempotencyOptions<Tx>): DynamicModule {
    return IdempotencyModule.with([{ provide: IDEMPOTENCY_OPTIONS, useValue: options }]);
  }

  /** Like {@link forRoot}, with the options (and so the store) built by an injected factory. */
  static forRootAsync<Tx = unknown>(options: IdempotencyModuleAsyncOptions<Tx>): DynamicModule {
    const module = IdempotencyModule.with([
      { provide: IDEMPOTENCY_OPTIONS, useFactory: options.useFactory as (...args: unknown[]) => unknown, inject: options.inject ?? [] },
    ]);
    return { ...module, imports: options.imports ?? [] };
  }

  private static with(optionsProvider: Provider[]): DynamicModule {
    const providers: Provider[] = [
      ...optionsProvider,
      { provide: IDEMPOTENCY, useFactory: (options: IdempotencyOptions) => new HttpIdempotency(options), inject: [IDEMPOTENCY_OPTIONS] },
      { provide: IDEMPOTENCY_STORE, useFactory: (core: HttpIdempotency) => core.engine.store, inject: [IDEMPOTENCY] },
      IdempotencyInterceptor,
    ];
    return { module: IdempotencyModule, global: true, providers, exports: [IDEMPOTENCY, IDEMPOTENCY_OPTIONS, IDEMPOTENCY_STORE, IdempotencyInterceptor] };
  }
}
Module({})(IdempotencyModule);

/**
 * Protects a route (on a handler) or every route of a controller (on the class). `options`
 * override the module's HTTP options for these routes (`required`, `methods`, `scope`, ...).
 * Only POST and PATCH are protected unless `methods` says otherwise.
 */
export function Idempotent(options: RouteIdempotencyOptions = {}): MethodDecorator & ClassDecorator {
  return applyDecorators(SetMetadata(IDEMPOTENT_METADATA, options), UseInterceptors(IdempotencyInterceptor));
}

/**
 * Parameter decorator: the request's `IdempotencyContext`, `undefined` when the request is
 * unprotected (a method not protected, or no key and the key not required).
 */
export const IdemContext: () => ParameterDecorator = createParamDecorator((_data: unknown, ctx: ExecutionContext) => {
  return (ctx.switchToHttp().getRequest() as Record<string, unknown>)[CONTEXT_PROPERTY];
});

export { IDEMPOTENCY, IDEMPOTENCY_OPTIONS, IDEMPOTENCY_STORE, IdempotencyInterceptor, type RouteIdempotencyOptions } from './interceptor.js';
export { HttpIdempotency, type IdempotencyOptions } from '../http/idempotency.js';
export type { IdempotencyContext } from '../http/context.js';
