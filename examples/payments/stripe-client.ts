/**
 * The official `stripe` SDK against the example payments API (`npm start`): it sends its own
 * Idempotency-Key and retries with it (`maxNetworkRetries`), and idem replays the charge.
 */
import Stripe from 'stripe';

export async function stripeCharge(port = 3000) {
  const stripe = new Stripe('sk_test_alice', { host: 'localhost', port, protocol: 'http', maxNetworkRetries: 3 });
  return stripe.charges.create({ amount: 1999, currency: 'usd', customer: 'cus_alice' });
}
