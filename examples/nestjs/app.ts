/**
 * NestJS example: `POST /v1/orders` protected by idem (`idem/nestjs`), on the Express or the
 * Fastify platform, run by test/nestjs.test.ts. The store comes from `forRootAsync` (built from
 * an injected database provider) and is itself injectable (`IDEMPOTENCY_STORE`). Decorators need
 * `experimentalDecorators`; every injection names its token, so no `emitDecoratorMetadata`.
 * Started by examples/nestjs/main.ts.
 */
// #region controller
import { BadRequestException, Body, Controller, Get, HttpCode, Inject, Module, Post, type DynamicModule } from '@nestjs/common';
import { IDEMPOTENCY_STORE, IdemContext, Idempotent, IdempotencyModule, type IdempotencyContext } from 'idem/nestjs';
import { PostgresStore, type Queryable, type SqlClient } from 'idem/postgres';

export const DB = Symbol('DB');
export const ORDERS = Symbol('ORDERS');

@Controller('v1/orders')
export class OrdersController {
  constructor(
    @Inject(DB) private readonly db: Queryable,
    @Inject(ORDERS) private readonly orders: string,
    @Inject(IDEMPOTENCY_STORE) readonly store: PostgresStore,
  ) {}

  @Post()
  @HttpCode(201)
  @Idempotent()
  async create(@Body() body: { total?: unknown }, @IdemContext() idem: IdempotencyContext<Queryable>) {
    // A 4xx before any phase is not stored: the client can fix the body and retry with the same key.
    if (!Number.isInteger(body.total) || (body.total as number) < 1) throw new BadRequestException('total must be a positive integer');
    return idem.phase('order_created', async (tx) => {
      const { rows } = await tx.query(`INSERT INTO "${this.orders}" (total) VALUES ($1) RETURNING id`, [body.total]);
      return { id: Number(rows[0]!.id), total: body.total };
    });
  }

  @Get('count')
  async count() {
    const { rows } = await this.db.query(`SELECT count(*)::int AS n FROM "${this.orders}"`);
    return { orders: Number(rows[0]!.n) };
  }
}
// #endregion controller

// #region module
@Module({})
export class DatabaseModule {
  static with(db: SqlClient & Queryable, orders: string): DynamicModule {
    return {
      module: DatabaseModule,
      global: true,
      providers: [
        { provide: DB, useValue: db },
        { provide: ORDERS, useValue: orders },
      ],
      exports: [DB, ORDERS],
    };
  }
}

@Module({})
export class AppModule {
  /** @param table idem's table; @param orders the orders table */
  static with(db: SqlClient & Queryable, table = 'idem_keys', orders = 'orders'): DynamicModule {
    return {
      module: AppModule,
      imports: [
        DatabaseModule.with(db, orders),
        IdempotencyModule.forRootAsync({
          inject: [DB, ORDERS],
          useFactory: async (client: SqlClient & Queryable, ordersTable: string) => {
            const store = new PostgresStore({ client, table });
            await store.migrate();
            await client.query(`CREATE TABLE IF NOT EXISTS "${ordersTable}" (id serial PRIMARY KEY, total integer NOT NULL)`);
            return { store, required: true };
          },
        }),
      ],
      controllers: [OrdersController],
    };
  }
}
// #endregion module
