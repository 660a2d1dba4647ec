/**
 * The response-shape contract (test/contracts/response-shapes/, protocol.md H23) on the web
 * core, Hono, Express, Koa, Fastify and the three Lambda event formats, over the memory store
 * and PGlite. NestJS: test/response-shapes-nest.test.ts; Next.js: test/response-shapes-next.test.ts.
 */
import { expressShapes, fastifyShapes, koaShapes } from './contracts/response-shapes/apps-node.js';
import { honoShapes, lambdaShapeApps, webCoreShapes } from './contracts/response-shapes/apps-web.js';
import { responseShapeContract } from './contracts/response-shapes/contract.js';

responseShapeContract([webCoreShapes, honoShapes, expressShapes, koaShapes, fastifyShapes, ...lambdaShapeApps]);
