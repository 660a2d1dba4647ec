/**
 * `idem/gateway`: a reverse proxy that gives a service in any language idem's protocol: durable,
 * fenced, per-principal idempotency keys in front of it (docs/guides/gateway.md). Needs the
 * optional peers `undici` (the upstream client), and `jose` for JWT principals and `yaml` for
 * YAML files when used.
 */
export { createGateway, type Gateway, type GatewayOptions } from './gateway.js';
export {
  GatewayConfigError,
  loadGatewayConfig,
  parseGatewayConfig,
  type GatewayConfig,
  type GatewayConfigInput,
  type PrincipalConfig,
  type RouteConfig,
} from './config.js';
export { ATTEMPT_HEADER, FENCING_TOKEN_HEADER, SCOPE_HEADER } from './headers.js';
export { GatewayProblem } from './faults.js';
