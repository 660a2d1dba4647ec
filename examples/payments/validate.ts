/**
 * Validation of `POST /v1/charges` bodies, JSON or Stripe's form encoding
 * (`amount=1000&currency=usd&customer=cus_1&metadata[order]=42`).
 */
import qs from 'qs';
import { isJsonMediaType, mediaType } from 'idem/core';

export interface ChargeRequest {
  /** Integer minor units (cents), 1 to 99 999 999 (Stripe's limit for most currencies). */
  amount: number;
  /** ISO 4217 code, 3 letters, lower-cased. */
  currency: string;
  customer: string;
  metadata: Record<string, string>;
  description?: string;
}

export type Validation = { ok: true; value: ChargeRequest } | { ok: false; param?: string; detail: string };

const ALLOWED = new Set(['amount', 'currency', 'customer', 'metadata', 'description']);

export function parseChargeRequest(contentType: string | null | undefined, body: Uint8Array): Validation {
  const type = mediaType(contentType);
  let input: unknown;
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(body);
  } catch {
    return { ok: false, detail: 'The body is not valid UTF-8.' };
  }
  if (isJsonMediaType(type)) {
    try {
      input = JSON.parse(text);
    } catch {
      return { ok: false, detail: 'The body is not valid JSON.' };
    }
  } else if (type === 'application/x-www-form-urlencoded') {
    try {
      input = qs.parse(text, { depth: 2, parameterLimit: 100, throwOnLimitExceeded: true, allowPrototypes: false });
    } catch {
      return { ok: false, detail: 'Too many form parameters: at most 100.' };
    }
  } else {
    return { ok: false, detail: 'Send the body as application/json or application/x-www-form-urlencoded.' };
  }
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    return { ok: false, detail: 'The body must be an object with amount, currency and customer.' };
  }
  const o = input as Record<string, unknown>;
  for (const name of Object.keys(o)) {
    if (!ALLOWED.has(name)) return { ok: false, param: name, detail: `Received unknown parameter: ${name}.` };
  }
  // Form bodies carry strings; JSON bodies must carry a number.
  const amount = typeof o.amount === 'string' && /^[0-9]{1,8}$/.test(o.amount) && !isJsonMediaType(type) ? Number(o.amount) : o.amount;
  if (typeof amount !== 'number' || !Number.isInteger(amount) || amount <= 0 || amount > 99_999_999) {
    return { ok: false, param: 'amount', detail: 'amount must be an integer number of minor units (e.g. cents), 1 to 99999999.' };
  }
  if (typeof o.currency !== 'string' || !/^[A-Za-z]{3}$/.test(o.currency)) {
    return { ok: false, param: 'currency', detail: 'currency must be a three-letter ISO 4217 code, e.g. "usd".' };
  }
  if (typeof o.customer !== 'string' || o.customer.length === 0 || o.customer.length > 255) {
    return { ok: false, param: 'customer', detail: 'customer must be a non-empty string of at most 255 characters.' };
  }
  // PostgreSQL text cannot hold NUL, and a lone surrogate (`"\ud800"`) is not Unicode: such a
  // charge would fail the same way on every attempt, so it is a 400 before any work.
  for (const [param, value] of stringFields(o)) {
    if (!isStorableText(value)) {
      return { ok: false, param, detail: `${param} contains a NUL character or invalid Unicode (a lone surrogate); send valid UTF-8 text without NUL.` };
    }
  }
  const metadata: Record<string, string> = {};
  if (o.metadata !== undefined && o.metadata !== '') {
    if (typeof o.metadata !== 'object' || o.metadata === null || Array.isArray(o.metadata)) {
      return { ok: false, param: 'metadata', detail: 'metadata must be an object of string values.' };
    }
    // Stripe's limits: 50 keys, keys up to 40 characters, values up to 500.
    const entries = Object.entries(o.metadata);
    if (entries.length > 50) return { ok: false, param: 'metadata', detail: 'metadata may have at most 50 keys.' };
    for (const [k, v] of entries) {
      if (typeof v !== 'string' && typeof v !== 'number') {
        return { ok: false, param: `metadata[${k}]`, detail: 'metadata values must be strings.' };
      }
      if (k.length > 40 || String(v).length > 500) {
        return { ok: false, param: `metadata[${k}]`, detail: 'metadata keys are at most 40 characters, values at most 500.' };
      }
      metadata[k] = String(v);
    }
  }
  if (o.description !== undefined && (typeof o.description !== 'string' || o.description.length > 1000)) {
    return { ok: false, param: 'description', detail: 'description must be a string of at most 1000 characters.' };
  }
  const value: ChargeRequest = { amount, currency: o.currency.toLowerCase(), customer: o.customer, metadata };
  if (typeof o.description === 'string') value.description = o.description;
  return { ok: true, value };
}

/** Every string the charge keeps (customer, description, metadata keys and values), by parameter name. */
function stringFields(o: Record<string, unknown>): Array<[string, string]> {
  const fields: Array<[string, string]> = [];
  for (const name of ['customer', 'currency', 'description'] as const) if (typeof o[name] === 'string') fields.push([name, o[name]]);
  if (o.metadata !== null && typeof o.metadata === 'object') {
    for (const [k, v] of Object.entries(o.metadata)) {
      fields.push([`metadata[${k}]`, k]);
      if (typeof v === 'string') fields.push([`metadata[${k}]`, v]);
    }
  }
  return fields;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** True for text PostgreSQL can store as is: well-formed Unicode without NUL. */
export function isStorableText(value: string): boolean {
  return !value.includes('\u0000') && !LONE_SURROGATE.test(value);
}
