/**
 * The response-shape contract (test/contracts/response-shapes/, protocol.md H23) on NestJS 11,
 * on the Express and on the Fastify platform, over the memory store and PGlite.
 */
import { nestShapeApps } from './contracts/response-shapes/apps-nest.js';
import { responseShapeContract } from './contracts/response-shapes/contract.js';

responseShapeContract(nestShapeApps);
