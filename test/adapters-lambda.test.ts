/**
 * The adapter contract suite (test/contracts/adapter.ts) run against idem/lambda in its
 * three event formats — API Gateway REST API (1.0), HTTP API (2.0) and Lambda function URLs —
 * through test/helpers/harness-lambda.ts, on every engine, the way test/adapters.test.ts runs
 * it: PGlite always, PostgreSQL when DATABASE_URL is set.
 */
import { adapterContractOverStores } from './helpers/adapter-run.js';
import { lambdaHarnesses } from './helpers/harness-lambda.js';

adapterContractOverStores('HTTP adapters (Lambda)', lambdaHarnesses);
