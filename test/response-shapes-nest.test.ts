/**
 * The response-shape contract (test/helpers/response-shapes/, protocol.md H23) on NestJS 11,
 * on the Express and on the Fastify platform, over the memory store and PGlite.
 */
import { nestShapeApps } from './helpers/response-shapes/apps-nest.js';
import { responseShapeContract } from './helpers/response-shapes/contract.js';

responseShapeContract(nestShapeApps);
