/**
 * The response-shape contract (test/contracts/response-shapes/, protocol.md H23) on Next.js
 * route handlers (test/helpers/harness-next.ts: examples/next built once and served in this
 * process), over the memory store and PGlite.
 */
import { after, before } from 'node:test';
import { nextShapes } from './contracts/response-shapes/apps-web.js';
import { responseShapeContract } from './contracts/response-shapes/contract.js';
import { startNext, stopNext } from './helpers/harness-next.js';

before(async () => void (await startNext()), { timeout: 600_000 });
after(stopNext);

responseShapeContract([nextShapes]);
