/**
 * DynamoDbStore (protocol.md K53): the store contract and the attempt contract on DynamoDB Local
 * (the full matrix: it runs on Java), and the DynamoDB cases of issue 43 on both emulators:
 * 32 concurrent duplicates run the work once; a takeover after the lease fences the late
 * writer; a response over 400 KB replays byte for byte; an item past retention is never
 * replayed, though TTL has not deleted it.
 */
import { describe } from 'node:test';
import { storeContract } from './contracts/store.js';
import { attemptContract } from './contracts/attempt.js';
import { dynamoDbFactory } from './helpers/dynamodb-stores.js';
import { startDynalite, startDynamoDbLocal } from './helpers/dynamodb.js';
import { fullMatrixOnly } from './helpers/services.js';
import { dynamoDbCases } from './helpers/dynamodb-cases.js';
import { dynamoDbExampleCases } from './helpers/dynamodb-example.js';

const local = dynamoDbFactory('DynamoDbStore on DynamoDB Local', startDynamoDbLocal);

describe('store contract: DynamoDbStore on DynamoDB Local', { skip: fullMatrixOnly() }, () => storeContract(local));
describe('attempt contract: DynamoDbStore on DynamoDB Local', { skip: fullMatrixOnly() }, () => attemptContract(local));
describe('DynamoDbStore on DynamoDB Local', { skip: fullMatrixOnly() }, () => dynamoDbCases(startDynamoDbLocal));
describe('DynamoDbStore on dynalite (in process)', () => dynamoDbCases(startDynalite));
describe('examples/dynamodb on DynamoDB Local', { skip: fullMatrixOnly() }, () => dynamoDbExampleCases(startDynamoDbLocal));
