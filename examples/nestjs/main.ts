/**
 * Starts the NestJS example (examples/nestjs/app.ts) on the Express platform, or on Fastify with
 * NEST_PLATFORM=fastify. `rawBody: true` makes idem fingerprint the bytes sent (without it, the
 * parsed body is canonicalised).
 *
 * Run: `npx tsx examples/nestjs/main.ts` (PostgreSQL at DATABASE_URL, else an in-memory PGlite).
 */
// #region main
import type { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { Queryable, SqlClient } from 'idem/postgres';
import { isMain, openDb } from '../shared/db.js';
import { AppModule } from './app.js';

/** The app on `platform`, over `db` (idem's table and the orders table as named). */
export async function bootstrap(db: SqlClient & Queryable, platform: 'express' | 'fastify', table?: string, orders?: string): Promise<INestApplication> {
  const module = AppModule.with(db, table, orders);
  return platform === 'fastify' ? NestFactory.create(module, new FastifyAdapter(), { rawBody: true }) : NestFactory.create(module, { rawBody: true });
}

if (isMain(import.meta.url)) {
  const app = await bootstrap(await openDb(), process.env.NEST_PLATFORM === 'fastify' ? 'fastify' : 'express');
  await app.listen(Number(process.env.PORT ?? 3000));
  console.log(`listening on ${await app.getUrl()}`);
}
// #endregion main
