/**
 * `idem/openapi`: idem's HTTP contract as OpenAPI components (3.0 and 3.1 alike): the
 * `Idempotency-Key` parameter (protocol.md H4, H5), the `Idempotent-Replayed` (H8),
 * `Retry-After` (H13, H17) and `Idempotency-Key-Expires` (H40) headers, and every problem idem
 * answers (H20) as an `application/problem+json` schema and response. `withIdempotency` merges
 * them into an existing document in one call, so generated clients see the key, the headers and
 * the problem types. Plain data: no dependency, no I/O.
 *
 * @example
 * ```ts
 * import { withIdempotency } from 'idem/openapi';
 * const document = withIdempotency(myDocument, { required: true, expiresHeader: true });
 * ```
 */
import { PROBLEM_TYPE_PREFIX, ProblemKind } from '../http/problem.js';

// biome-ignore lint/suspicious/noExplicitAny: an OpenAPI document is any JSON object; no OpenAPI types are imported
type Json = Record<string, any>;

/** Options of {@link idempotencyComponents} and {@link withIdempotency}; mirror the HTTP options. */
export interface OpenApiOptions {
  /** As the HTTP option `required` (H2): the parameter is required, and 400 `idempotency-key-missing` is listed. @default false */
  required?: boolean;
  /** As the HTTP option `headerName`. @default 'Idempotency-Key' */
  headerName?: string;
  /** As the HTTP option `mismatchStatus` (H11). @default 422 */
  mismatchStatus?: 400 | 409 | 422;
  /** As the HTTP option `inProgressStatus` (H13). @default 409 */
  inProgressStatus?: 409 | 423;
  /** As the HTTP option `expiresHeader` (H40): list the expiry header on answers with a stored response. @default false */
  expiresHeader?: boolean | string;
  /** As `problems.stripe`: the problem schemas carry Stripe's `error` member. @default false */
  stripe?: boolean;
  /** The methods idem protects (H1), lower or upper case. @default ['post', 'patch'] */
  methods?: string[];
  /** `withIdempotency` only: which operations get idem's parameter and answers. @default every operation of a protected method */
  include?: (path: string, method: string, operation: Json) => boolean;
  /** Prefix of every component name, so they never clash with the document's own. @default 'Idem' */
  prefix?: string;
  /**
   * The operations are webhook receivers (`idem/webhooks`): add the 401 problem of a delivery
   * whose signature did not verify (protocol.md K37), and the 413 of a body over the receiver's
   * `maxBodyBytes` (H27). @default false
   */
  webhooks?: boolean;
  /** The API sets `maxBodyBytes` (H27): add the 413 problem of a body over it. @default false (true with `webhooks`) */
  maxBodyBytes?: boolean;
}

/** Each problem idem answers: its kind, status and when (protocol.md H20). */
const PROBLEMS: Array<{ kind: ProblemKind; name: string; status: number; when: string; retryAfter?: true }> = [
  { kind: ProblemKind.MissingKey, name: 'KeyMissing', status: 400, when: 'The request carries no idempotency key and the API requires one (H2).' },
  { kind: ProblemKind.InvalidKey, name: 'KeyInvalid', status: 400, when: 'The key is not 1-255 printable ASCII characters, or was sent twice (H5).' },
  { kind: ProblemKind.KeyReused, name: 'KeyReused', status: 422, when: 'The key was used with a different request (H11).' },
  {
    kind: ProblemKind.InProgress,
    name: 'InProgress',
    status: 409,
    when: 'A request with this key is still running: retry after Retry-After (H13).',
    retryAfter: true,
  },
  { kind: ProblemKind.LeaseLost, name: 'LeaseLost', status: 409, when: 'Another attempt took this request over: retry with the same key (H15).' },
  { kind: ProblemKind.ExecutionFailed, name: 'FailedRetry', status: 500, when: 'The request failed mid-way: retry with the same key and it resumes (H10).' },
  {
    kind: ProblemKind.FailedPermanently,
    name: 'FailedPermanently',
    status: 500,
    when: 'The request failed on every allowed attempt; it is not tried again (K23).',
  },
  { kind: ProblemKind.ResponseTooLarge, name: 'ResponseTooLarge', status: 500, when: 'The response was larger than the API keeps for replay.' },
  {
    kind: ProblemKind.StoreUnavailable,
    name: 'StoreUnavailable',
    status: 503,
    when: 'The idempotency store did not answer; nothing ran: retry with the same key after Retry-After (H17).',
    retryAfter: true,
  },
  {
    kind: ProblemKind.WebhookRefused,
    name: 'WebhookSignatureInvalid',
    status: 401,
    when: "A webhook receiver refused a delivery whose signature is missing or invalid; nothing was claimed (K37). Stripe's preset answers 400.",
  },
  {
    kind: ProblemKind.RequestTooLarge,
    name: 'RequestTooLarge',
    status: 413,
    when: 'The request body is larger than maxBodyBytes; nothing was read past it or claimed (H27).',
  },
  {
    kind: ProblemKind.MalformedBody,
    name: 'RequestBodyMalformed',
    status: 400,
    when: 'A multipart/form-data body does not parse, so it has no canonical fingerprint; nothing was claimed (H42).',
  },
];

/**
 * idem's OpenAPI components: `parameters`, `headers`, `schemas` and `responses` (one response
 * per status idem answers, its content one of that status's problem schemas). Names start with
 * `prefix` (`Idem`): `IdemIdempotencyKey`, `IdemIdempotentReplayed`, `IdemProblemInProgress`, …
 */
export function idempotencyComponents(options: OpenApiOptions = {}): Json {
  const p = options.prefix ?? 'Idem';
  const headerName = options.headerName ?? 'Idempotency-Key';
  const ref = (kind: string, name: string) => ({ $ref: `#/components/${kind}/${p}${name}` });
  const schemas: Json = {
    [`${p}Problem`]: {
      type: 'object',
      description: 'RFC 9457 problem details, as idem writes them (protocol.md H20).',
      required: ['type', 'title', 'status'],
      properties: {
        type: { type: 'string', description: `\`${PROBLEM_TYPE_PREFIX}\` and the condition` },
        title: { type: 'string' },
        status: { type: 'integer' },
        detail: { type: 'string' },
        instance: { type: 'string' },
        ...(options.stripe
          ? {
              error: {
                type: 'object',
                description: "Stripe's error member (problems: { stripe: true }).",
                required: ['type', 'message'],
                properties: { type: { type: 'string' }, code: { type: 'string' }, message: { type: 'string' }, param: { type: 'string' } },
              },
            }
          : {}),
      },
    },
  };
  for (const problem of problems(options)) {
    schemas[`${p}Problem${problem.name}`] = {
      description: problem.when,
      allOf: [
        ref('schemas', 'Problem'),
        {
          type: 'object',
          properties: { type: { type: 'string', enum: [PROBLEM_TYPE_PREFIX + problem.kind] }, status: { type: 'integer', enum: [problem.status] } },
        },
      ],
    };
  }
  const headers: Json = {
    [`${p}IdempotentReplayed`]: {
      description: 'Present (`true`) when this response is the stored answer to an earlier request with the same key (H8).',
      schema: { type: 'string', enum: ['true'] },
    },
    [`${p}RetryAfter`]: { description: 'Seconds to wait before retrying with the same key (H13, H17).', schema: { type: 'integer', minimum: 1 } },
  };
  if (options.expiresHeader) {
    headers[`${p}IdempotencyKeyExpires`] = {
      description: 'When the key’s record ends (an HTTP-date): until then a retry with this key gets this answer; after it, it runs as new (H40).',
      schema: { type: 'string' },
    };
  }
  const responses: Json = {};
  for (const [status, group] of byStatus(problems(options))) {
    const schema = group.length === 1 ? ref('schemas', `Problem${group[0]!.name}`) : { oneOf: group.map((g) => ref('schemas', `Problem${g.name}`)) };
    responses[`${p}Problem${status}`] = {
      description: group.map((g) => g.when).join(' '),
      ...(group.some((g) => g.retryAfter) ? { headers: { 'Retry-After': ref('headers', 'RetryAfter') } } : {}),
      content: { 'application/problem+json': { schema } },
    };
  }
  return {
    parameters: {
      [`${p}IdempotencyKey`]: {
        name: headerName,
        in: 'header',
        required: options.required === true,
        description:
          'One key per intent (a UUID), the same on every retry of it (K1). A retry with the same key and body gets the first answer, marked Idempotent-Replayed (H8); another body gets a problem (H11).',
        schema: { type: 'string', minLength: 1, maxLength: 255, pattern: '^[\\x20-\\x7E]+$' },
      },
    },
    headers,
    schemas,
    responses,
  };
}

/**
 * A copy of `document` with idem's components merged in (existing components of the same name
 * are kept) and, on every included operation, the key parameter, the replay (and expiry)
 * headers on each answer the operation describes (any of them may be stored, H9), and a
 * `$ref` to idem's problem response for each status the operation does not answer already.
 */
export function withIdempotency<T extends object>(document: T, options: OpenApiOptions = {}): T {
  const doc = structuredClone(document) as Json;
  const p = options.prefix ?? 'Idem';
  const components = idempotencyComponents(options);
  doc.components ??= {};
  for (const [section, entries] of Object.entries(components)) {
    doc.components[section] = { ...entries, ...(doc.components[section] ?? {}) };
  }
  const methods = new Set((options.methods ?? ['post', 'patch']).map((m) => m.toLowerCase()));
  const statuses = new Set(problems(options).map((problem) => String(problem.status)));
  const stored: Json = { 'Idempotent-Replayed': { $ref: `#/components/headers/${p}IdempotentReplayed` } };
  if (options.expiresHeader) {
    const name = options.expiresHeader === true ? 'Idempotency-Key-Expires' : options.expiresHeader;
    stored[name] = { $ref: `#/components/headers/${p}IdempotencyKeyExpires` };
  }
  for (const [path, item] of Object.entries((doc.paths ?? {}) as Json)) {
    for (const [method, operation] of Object.entries(item as Json)) {
      if (!methods.has(method) || typeof operation !== 'object' || operation === null) continue;
      if (options.include && !options.include(path, method, operation)) continue;
      const key = { $ref: `#/components/parameters/${p}IdempotencyKey` };
      operation.parameters = [...(operation.parameters ?? []).filter((x: Json) => x.$ref !== key.$ref), key];
      operation.responses ??= {};
      for (const response of Object.values(operation.responses as Json)) {
        // Any answer the operation describes may be stored and replayed (protocol.md H9); idem's own problems are $refs.
        if (typeof response !== 'object' || response === null || '$ref' in response) continue;
        response.headers = { ...stored, ...(response.headers ?? {}) };
      }
      for (const status of statuses) operation.responses[status] ??= { $ref: `#/components/responses/${p}Problem${status}` };
    }
  }
  return doc as T;
}

/** The problems an API with `options` answers: 400 missing only when required, the webhook 401 only for receivers, the mismatch at its status. */
function problems(options: OpenApiOptions) {
  const answered = PROBLEMS.filter(
    (problem) =>
      (problem.kind !== ProblemKind.MissingKey || options.required) &&
      (problem.kind !== ProblemKind.WebhookRefused || options.webhooks) &&
      (problem.kind !== ProblemKind.RequestTooLarge || options.webhooks || options.maxBodyBytes),
  );
  return answered.map((problem) =>
    problem.kind === ProblemKind.KeyReused
      ? { ...problem, status: options.mismatchStatus ?? 422 }
      : problem.kind === ProblemKind.InProgress
        ? { ...problem, status: options.inProgressStatus ?? 409 }
        : problem,
  );
}

function byStatus<T extends { status: number }>(items: T[]): Map<number, T[]> {
  const groups = new Map<number, T[]>();
  for (const item of items) groups.set(item.status, [...(groups.get(item.status) ?? []), item]);
  return groups;
}
