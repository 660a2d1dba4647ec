/*
 * idem's key protocol as a Promela model, checked exhaustively by spin (issue 19).
 * Read docs/model/README.md first. Run: `npm run model` (scripts/model.sh).
 *
 * One key (one row of the key table), three client requests for it (W0 and W1 send the same
 * request, fingerprint A; W2 a different one, fingerprint B), each retried by its client
 * until it has a final answer; the completer; the sweeper; the clock; and an external PSP
 * that dedupes by idempotency key. Every statement of the store is one atomic step whose
 * guard is the statement's WHERE clause, condition for condition. Each step names the
 * statement (the constant in `statements()`, src/postgres/sql.ts, or the `src/postgres/sql/`
 * folder it is being split into) and the code that issues it.
 *
 * Time is abstract: the row keeps the ticks its lease has left (`lease`, 0 = ended: expired,
 * released (`locked_until = now()`) or finished (NULL)) and its age in ticks since `created_at` (`age`, saturating at RET); the Clock
 * process ticks nondeterministically. `locked_until <= now()` is `lease == 0`,
 * `created_at <= now() - retention` is `age >= RET`.
 *
 * Compile-time switches: mutants (MUT_*, each must yield a counterexample, see the README),
 * CALL_FIRST (the handler calls the PSP before its local phase) and CRASH_LOOP (the handler
 * kills its process on every attempt, protocol.md K23).
 */

/* ---------- bounds ----------
 * The fault budgets' defaults (one of each at once) make a state space of more than 15 million
 * states; `npm run model` splits them over configurations instead (docs/model/README.md). */
#define LEASE    1   /* ticks a claim, takeover, phase commit or heartbeat grants */
#define RET      1   /* retention in ticks */
#ifndef CRASHES
#define CRASHES  1   /* process crashes in the whole run (workers and completer) */
#endif
#ifndef THROWS
#define THROWS   1   /* handler errors (release on a thrown error) */
#endif
#ifndef REJECTS
#define REJECTS  1   /* requests rejected before any phase (discard) */
#endif
#ifndef STALLS
#define STALLS   1   /* leases that run out while their worker is alive (a slow worker) */
#endif
#define HBS      1   /* heartbeats per execution (maxExecutionMs caps them) */
#define MAXATT   2   /* maxAttempts: failed attempts after which a taker gives up (protocol.md K23) */
#define MAXC     20  /* claim ids and tokens are < MAXC (asserted) */

#define NOH      255 /* no holder */
#define COMPLETER 3  /* the completer's id; workers are 0..2 */
#define STARTED  1
#define DONE     2
/* recovery points: 0 'start', 1 first step committed, 2 second step committed, 3 'finished' */

typedef Row {
  bit  present;
  byte state;    /* STARTED, DONE */
  bit  fp;       /* fingerprint: 0 = A, 1 = B */
  byte rp;       /* recovery_point */
  byte tok;      /* lock_version */
  byte claim;    /* claim_id */
  byte lease;    /* ticks left of locked_until; 0 = NULL, now() (released) or past */
  byte age;      /* ticks since created_at, saturating at RET */
  byte req;      /* request snapshot: 0 NULL, else fingerprint + 1 of the request saved */
  byte resp;     /* response: 0 NULL, else the claim id of the finish that stored it */
  byte respfp;   /* fingerprint + 1 of the request whose handler produced the response */
  byte failed;   /* failed_attempts: leases taken over that ran out unreleased (protocol.md K23) */
  bit  rel;      /* released: set by `release`, cleared by the next takeover */
}
Row row;

/* ---------- sequences (nextval, gen_random_uuid) ---------- */
byte nexttok = 1;
byte nextclaim = 1;

/* ---------- budgets of the environment ---------- */
byte crashes = CRASHES;
byte throws = THROWS;
byte rejects = REJECTS;
byte stalls = STALLS;

/* ---------- ghost state for the properties ---------- */
byte holder = NOH;        /* who was handed the row's current token (claim, takeover, replace) */
bit  alive[4];            /* that execution is still running (not crashed, ended or fenced) */
byte effects[2 * MAXC];   /* committed effects per (claim, step) */
bit  charged[MAXC];       /* PSP: derived key (claim, 'psp') charged once; a repeat is deduplicated */
byte reqclaim[2];         /* per request (fingerprint): the claim its PSP charge was made under */
bit  retired[MAXC];       /* the claim was ended by retention (replaced or swept) */
bit  finished[MAXC];      /* a finish committed for the claim */
bit  answered[3];         /* the client has its final answer */
byte runs;                /* handler runs on the key (CRASH_LOOP: each one kills its process) */
byte unreleased;          /* executions that ended without a release: crashes, stalls, crash loops */

/* ---------- the store's statements ---------- */

/* The fence of every write after the claim (protocol.md K8): `key = $2 AND lock_version = $3 AND
 * state = 'started'`. */
#define FENCE(t)   (row.present && row.tok == t && row.state == STARTED)

/* recordPhase's WHERE; MUT_NO_FENCE drops `lock_version = $3` from it. */
#ifdef MUT_NO_FENCE
#define PHASE_FENCE(t)  (row.present && row.state == STARTED)
#else
#define PHASE_FENCE(t)  FENCE(t)
#endif

/* finish's WHERE; MUT_FINISH_NO_FENCE drops `lock_version = $3` from it. */
#ifdef MUT_FINISH_NO_FENCE
#define FINISH_FENCE(t) (row.present && row.state == STARTED)
#else
#define FINISH_FENCE(t) FENCE(t)
#endif

/* A fresh token: nextval of the table's sequence (sql.ts `nextToken`); MUT_ROW_TOKEN is the
 * old per-row counter (DEFAULT 0, lock_version + 1), which restarts for a new row. */
#ifdef MUT_ROW_TOKEN
#define NEWTOK(fresh)  if :: fresh -> row.tok = 1 :: else -> row.tok = row.tok + 1 fi
#else
#define NEWTOK(fresh)  row.tok = nexttok; nexttok++; assert(nexttok < MAXC)
#endif

/* gen_random_uuid() for claim_id. */
#define NEWCLAIM   row.claim = nextclaim; nextclaim++; assert(nextclaim < MAXC)

/* A deleted row: every column cleared (keeps the state vector canonical). */
#define DELETE_ROW  row.present = 0; row.state = 0; row.fp = 0; row.rp = 0; row.tok = 0; row.claim = 0; \
                    row.lease = 0; row.age = 0; row.req = 0; row.resp = 0; row.respfp = 0; \
                    row.failed = 0; row.rel = 0; holder = NOH

/* What the holder learns from a claim, takeover or replacement (RETURNING ...). */
#define HOLD(me)   holder = me; alive[me] = 1; tok = row.tok; cl = row.claim; rp = row.rp; hb = HBS

/* ---------- atomic steps shared by workers and the completer ----------
 * Every step that can be preceded by a crash of the process offers it as one more choice:
 * CRASH(me) -- the process dies before the statement; nothing more is written by it. */
#define CRASH(me)  :: crashes > 0 -> crashes--; unreleased++; alive[me] = 0; goto crashed

/* Execution.phase / Execution.call -> PostgresStore.commit -> sql `recordPhase` (protocol.md
 * Q4, K4): the local effect and the recovery point in one transaction, committed only if the
 * fenced UPDATE matched; the lease is renewed. Step `s` (1 or 2) of claim `cl`. */
inline commit_step(me, s) {
  atomic {
    if
    CRASH(me);
    :: PHASE_FENCE(tok) ->
       assert(holder == me);                      /* a stale token commits nothing */
       effects[2 * cl + s - 1]++;
       assert(effects[2 * cl + s - 1] <= 1);      /* one committed effect per (claim, step) */
       row.rp = s; row.lease = LEASE; rp = s
    :: !PHASE_FENCE(tok) -> alive[me] = 0; goto lost  /* fenced: LeaseLostError, rolled back */
    fi
  }
}

/* Execution.call's external call: the PSP charged with derivedKey('psp') = (scope, key,
 * claim_id, 'psp') (src/core/derived-key.ts deriveKey, protocol.md K10); the PSP dedupes by that key. A
 * thrown error instead (PSP down): HttpIdempotency.fail -> Execution.release -> sql `release`
 * (protocol.md K10: release on a thrown error, locked_until = now(), recovery point kept). */
inline psp_call(me, fpx) {
  atomic {
    if
    CRASH(me);
    :: throws > 0 ->
       throws--;
       if
       :: FENCE(tok) -> assert(holder == me); row.lease = 0; row.rel = 1
       :: else -> skip
       fi;
       alive[me] = 0; goto lost
    :: !charged[cl] ->
       charged[cl] = 1;                           /* the one PSP charge of this derived key */
       /* one charge per request among its claims not ended by retention (past retention a
        * key counts as absent and a new claim is a new request, protocol.md K6) */
       if
       :: !retired[cl] ->
          assert(reqclaim[fpx] == 0 || reqclaim[fpx] == cl || retired[reqclaim[fpx]]);
          reqclaim[fpx] = cl
       :: else -> skip
       fi
    :: charged[cl] -> skip                         /* deduplicated: the stored result */
    fi
  }
}

/* Execution.discard -> PostgresStore.release(ref, { discard: true }): sql `discard` (DELETE
 * ... AND state = 'started' AND recovery_point = 'start'), else sql `release`. */
inline discard(me) {
  atomic {
    if
    :: FENCE(tok) && row.rp == 0 -> assert(holder == me); DELETE_ROW
    :: FENCE(tok) && row.rp != 0 -> assert(holder == me); row.lease = 0; row.rel = 1
    :: else -> skip
    fi;
    alive[me] = 0
  }
}

/* Heartbeat: Execution.startHeartbeat -> PostgresStore.extendLease -> sql `extendLease`
 * (protocol.md K7), at most HBS per execution (maxExecutionMs). Fenced: changes nothing. */
inline heartbeat(me) {
  if
  :: hb > 0 ->
     atomic {
       hb--;
       if
       :: FENCE(tok) -> assert(holder == me); row.lease = LEASE
       :: else -> skip
       fi
     }
  :: true -> skip
  fi
}

/* The handler's work from the recovery point (src/engine/execution.ts; the example's order:
 * a local phase, the PSP call, finish; CALL_FIRST: the call first). Completed steps are
 * skipped (Execution.completed). */
#ifndef CALL_FIRST
#define STEP_LOCAL 1
#define STEP_CALL  2
#else
#define STEP_LOCAL 2
#define STEP_CALL  1
#endif

inline local_step(me) {
  if
  :: rp < STEP_LOCAL -> commit_step(me, STEP_LOCAL)
  :: else -> skip
  fi
}

inline call_step(me, fpx) {
  if
  :: rp < STEP_CALL ->
     heartbeat(me);
     psp_call(me, fpx);
     commit_step(me, STEP_CALL)          /* a crash before it: charged, not recorded */
  :: else -> skip
  fi
}

/* Execution.finish -> PostgresStore.commit -> sql `finish` (protocol.md Q5, K5): state done,
 * the response stored, lease cleared, in the last transaction. `answered`: the response
 * reached the client, unless the process died right after the commit. */
inline work(me, fpx) {
#ifdef CRASH_LOOP
  atomic { runs++; assert(runs <= MAXATT) }   /* a crash loop ends at maxAttempts (protocol.md K23) */
#endif
#ifndef CALL_FIRST
  local_step(me);
#ifdef CRASH_LOOP
  /* the handler kills its process on every attempt, after its local phase: no release */
  atomic { unreleased++; alive[me] = 0; goto crashed };
#endif
  call_step(me, fpx);
#else
  call_step(me, fpx);
  local_step(me);
#endif
  finish_key(me, fpx)
}

/* HttpIdempotency.endCrashLoop / IdempotentConsumer.run (protocol.md K23): a taker that finds
 * maxAttempts failed attempts does not run the handler; it finishes the key with the stored
 * permanent problem (the consumer dead-letters; modelled as the HTTP finish). */
inline give_up(me, fpx) {
  finish_key(me, fpx)
}

inline finish_key(me, fpx) {
  atomic {
    if
    CRASH(me);
    :: FINISH_FENCE(tok) ->
       assert(holder == me);
       assert(!finished[cl]);                  /* no finish overwrites another */
       assert(row.fp == fpx);                  /* the response comes from the key's request */
       finished[cl] = 1;
       row.state = DONE; row.rp = 3; row.resp = cl; row.respfp = fpx + 1; row.lease = 0;
       alive[me] = 0
    :: !FINISH_FENCE(tok) -> alive[me] = 0; goto lost
    fi
  }
}

/* sql `takeOver` (protocol.md Q3): `lock_version = $3 AND state = 'started' AND lease expired`,
 * a compare-and-set on the token read. MUT_NO_CAS drops the compare (token and lease): a
 * read-then-write takeover. MUT_NO_CAS_TOKEN drops only `lock_version = $3`. */
#if defined(MUT_NO_CAS)
#define TAKEOVER_OK(t)  (row.present && row.state == STARTED)
#elif defined(MUT_NO_CAS_TOKEN)
#define TAKEOVER_OK(t)  (row.present && row.state == STARTED && row.lease == 0)
#else
#define TAKEOVER_OK(t)  (row.present && row.tok == t && row.state == STARTED && row.lease == 0)
#endif

/* The count in sql `takeOver` (protocol.md K23): `failed_attempts + CASE WHEN released THEN 0
 * ELSE 1 END, released = false`. MUT_TAKEOVER_UNCOUNTED: no count (the old takeover);
 * MUT_COUNT_RELEASED: a released key counted too. */
#if defined(MUT_TAKEOVER_UNCOUNTED)
#define COUNT_TAKEOVER  row.rel = 0
#elif defined(MUT_COUNT_RELEASED)
#define COUNT_TAKEOVER  row.failed++; row.rel = 0
#else
#define COUNT_TAKEOVER  if :: !row.rel -> row.failed++ :: else -> skip fi; row.rel = 0
#endif

inline take_over(me, t) {
  atomic {
    if
    :: TAKEOVER_OK(t) ->
       assert(row.lease == 0);                 /* no live lease is taken over */
       NEWTOK(false); row.lease = LEASE;
       COUNT_TAKEOVER;
       assert(row.failed <= unreleased);       /* only an end without release counts (K23) */
       fails = row.failed;                     /* RETURNING failed_attempts */
       HOLD(me); t = 0; took = 1
    :: else -> t = 0; took = 0                 /* lost: another worker was first */
    fi
  }
}

/* ---------- a client request, retried until it has its answer ---------- */

/* decide's in-progress outcome for this request (a 409): it changes nothing, the client waits
 * and retries, so the read below is taken only when it would not be this 409. */
#define INPROGRESS_SAME  (row.present && !(row.age >= RET && row.lease == 0) && \
                          row.state == STARTED && row.lease > 0 && row.fp == fp)

proctype Worker(byte me; bit fp) {
  byte tok, cl, rp, hb, fails;
  bit took;
  byte s_tok;

begin:
  /* PostgresStore.claim: sql `readDone` (while replays dominate; an optimisation only), then
   * sql `claim` (protocol.md Q1: INSERT ... WHERE NOT EXISTS ... ON CONFLICT DO NOTHING, else
   * the existing row, protocol.md Q2), or after a
   * lost insert race sql `readForUpdate`: one atomic insert-or-read. The decision on the row
   * read (src/core/decide.ts decide, pure) is taken in the same step. */
  atomic {
    !INPROGRESS_SAME ->
    tok = 0; cl = 0; rp = 0; hb = 0; took = 0;
    if
    :: !row.present ->
       row.present = 1; row.state = STARTED; row.fp = fp; row.rp = 0;
       NEWTOK(true); NEWCLAIM; row.lease = LEASE; row.age = 0;
       row.req = 0; row.resp = 0; row.respfp = 0; row.failed = 0; row.rel = 0; runs = 0;
       HOLD(me); fails = 0; goto claimed
    /* retention_expired AND lease_expired: the row counts as absent (protocol.md K6) */
    :: row.present && row.age >= RET && row.lease == 0 -> s_tok = row.tok; goto replace
    :: row.present && !(row.age >= RET && row.lease == 0) ->
       /* decide (protocol.md K3): mismatch, then replay, then take-over, then in-progress.
        * MUT_ORDER checks in-progress before the mismatch; MUT_REPLAY_FIRST checks replay
        * before the mismatch. */
       if
#if defined(MUT_ORDER)
       :: row.state == STARTED && row.lease > 0 -> goto inprogress
       :: else -> skip
       fi;
       if
#elif defined(MUT_REPLAY_FIRST)
       :: row.state == DONE -> goto replay
       :: else -> skip
       fi;
       if
#endif
       :: row.fp != fp -> answered[me] = 1; goto finish            /* mismatch: 422 */
       :: row.fp == fp && row.state == DONE -> goto replay
       :: row.fp == fp && row.state == STARTED && row.lease == 0 -> s_tok = row.tok; goto takeover
       :: row.fp == fp && row.state == STARTED && row.lease > 0 -> goto inprogress  /* 409 */
       fi
    fi;
inprogress:
    /* 409 with Retry-After, the client retries. protocol.md H12: a different request is 422. */
    assert(row.fp == fp);
    goto begin;
replay:
    /* replayResponse: the stored response of the one finish, produced for this request */
    assert(row.fp == fp);
    assert(row.respfp == fp + 1);
    assert(row.resp == row.claim && finished[row.claim]);
    answered[me] = 1;
    goto finish
  };

takeover:
  /* IdempotencyEngine.begin 'take-over' -> IdempotencyEngine.takeOver -> sql `takeOver` */
  take_over(me, s_tok);
  if
  :: took && fails >= MAXATT -> give_up(me, fp); answered[me] = 1; goto finish
  :: took && fails < MAXATT -> goto claimed
  :: else -> goto begin                        /* the engine claims again */
  fi;

replace:
  /* sql `replaceExpired` (protocol.md K6): `lock_version = $6` (the token read), past
   * retention, no valid lease; new token, new claim id, created_at = now() */
  atomic {
    if
    :: row.present && row.tok == s_tok && row.age >= RET && row.lease == 0 ->
       assert(row.lease == 0);                  /* no live lease is replaced */
       retired[row.claim] = 1;
       row.fp = fp; row.state = STARTED; row.rp = 0; row.lease = LEASE;
       NEWTOK(false); NEWCLAIM; row.age = 0;
       row.resp = 0; row.respfp = 0; row.failed = 0; row.rel = 0; runs = 0;
#ifndef MUT_REPLACE_KEEPS_REQUEST
       row.req = 0;                             /* request = NULL */
#endif
       HOLD(me); fails = 0; s_tok = 0; goto claimed
    :: else -> s_tok = 0; goto begin            /* changed in between: claim again */
    fi
  };

claimed:
  /* HttpIdempotency.saveRequest -> PostgresStore.saveRequest -> sql `saveRequest` (for the
   * completer, protocol.md K11), fenced; fenced -> release, 409 */
  atomic {
    if
    CRASH(me);
    :: FENCE(tok) -> assert(holder == me); row.req = fp + 1
    :: !FENCE(tok) -> alive[me] = 0; goto lost
    fi
  }
  /* HttpIdempotency.complete: rejected before any phase (!workStarted, a 4xx) ->
   * Execution.discard; the client fixes its request and retries. */
  if
  :: atomic { rejects > 0 && rp == 0 -> rejects-- }; discard(me); goto begin
  :: true -> skip
  fi;
  work(me, fp);
  answered[me] = 1;
  goto finish;

lost:     /* LeaseLostError: 409, the client retries */
crashed:  /* the connection broke: the client retries */
  goto begin;

finish:
  skip
}

/* ---------- the completer (src/http/completer.ts Completer.pass / drive) ---------- */

active proctype Completer() {
  byte tok, cl, rp, hb, fails;
  bit took;
  byte c_tok, c_rp, c_req;
  bit fpx;
end_idle:
  do
  :: atomic {
       /* sql `listAbandoned`: state = 'started', lease ended (grace 0), within retention. A
        * released key is listed at once here: with graceMs > 0 the store waits the grace after
        * the release's now(), which only removes interleavings (the completer coming first),
        * so grace 0 checks the harder case. */
       row.present && row.state == STARTED && row.lease == 0 && row.age < RET ->
       c_tok = row.tok; c_rp = row.rp; c_req = row.req;
       if
       :: c_req == 0 && c_rp != 0 -> c_tok = 0; c_rp = 0   /* 'skipped': committed, no request */
       :: else -> skip
       fi
     };
     if
     :: c_tok == 0 -> goto next
     :: else -> skip
     fi;
#ifndef MUT_COMPLETER_STALE_DISCARD
     /* No request stored and nothing committed: Completer.drive ->
      * PostgresStore.discardAbandoned -> sql `discardAbandoned`, one compare-and-set on the row
      * as it is now: the token listed, started at 'start', request NULL, no valid lease.
      * MUT_COMPLETER_STALE_DISCARD: the earlier takeover, then a discard decided on the listing. */
     if
     :: c_req == 0 ->
        atomic {
          if
          :: row.present && row.tok == c_tok && row.state == STARTED && row.rp == 0 && row.req == 0 && row.lease == 0 ->
             assert(row.lease == 0); DELETE_ROW
          :: else -> skip                          /* 'lost': the key changed */
          fi
        };
        goto next
     :: else -> skip
     fi;
#endif
     /* Completer.drive -> IdempotencyEngine.takeOver -> sql `takeOver` */
     take_over(COMPLETER, c_tok);
     if
     :: !took -> goto next                      /* 'lost' */
     :: else -> skip
     fi;
#ifdef MUT_COMPLETER_DISCARD_ANY
     if
     :: rp == 0 -> discard(COMPLETER); goto next
     :: else -> skip
     fi;
#endif
     if
     :: c_req == 0 -> discard(COMPLETER); goto next   /* no request stored: never ran */
     :: else -> skip
     fi;
     /* HttpIdempotency.resume with the stored request */
     fpx = c_req - 1;
     if
     :: fails >= MAXATT -> give_up(COMPLETER, fpx); goto next
     :: else -> skip
     fi;
     work(COMPLETER, fpx);
     goto next;
lost:
crashed:
next:
     atomic { c_tok = 0; c_rp = 0; c_req = 0; fpx = 0; tok = 0; cl = 0; rp = 0; hb = 0; took = 0; fails = 0 }
  od
}

/* ---------- retention (PostgresStore.sweepReport) ---------- */

active proctype Sweeper() {
end_idle:
  do
  :: atomic {
       /* sql `sweepCutoff` then sql `sweepBatch` (protocol.md Q6): created_at at or before the
        * cutoff and no valid lease, FOR UPDATE SKIP LOCKED. One step: a row past the cutoff
        * when the sweep starts is past it at the batch too, unless replaced (created_at =
        * now(), after the cutoff), so this is a sweep started at the batch's moment.
        * MUT_NO_SWEEP_LEASE drops the lease check. */
#ifdef MUT_NO_SWEEP_LEASE
       row.present && row.age >= RET ->
#else
       row.present && row.age >= RET && row.lease == 0 ->
#endif
       assert(row.lease == 0);                  /* no live lease is swept */
       retired[row.claim] = 1; DELETE_ROW
     }
  od
}

/* ---------- the clock ---------- */

active proctype Clock() {
end_idle:
  do
#ifndef CRASH_LOOP
  :: atomic { row.present && row.age < RET -> row.age++ }
#endif
  /* CRASH_LOOP: the row does not age. Past retention a key is a new request with a new count
   * (protocol.md K6); retention (24 h) outlasts maxAttempts leases by far, and a row that aged
   * out in the loop would start an unbounded number of claims (tokens). */
  /* a lease runs out: freely when its holder is gone, or (STALLS times) under a live but
   * slow worker */
  :: atomic { row.present && row.lease > 0 && (row.lease > 1 || holder == NOH || !alive[holder]) -> row.lease-- }
  :: atomic { row.present && row.lease == 1 && holder != NOH && alive[holder] && stalls > 0 -> stalls--; unreleased++; row.lease = 0 }
  od
}

init {
  atomic {
    run Worker(0, 0);
    run Worker(1, 0);
    run Worker(2, 1)
  }
}

/* Liveness under weak fairness (`pan -a -f`): once the finite budgets of crashes, throws,
 * rejects and stalls are spent, every client gets its final answer and the key is not left
 * started. */
#define ALL_ANSWERED (answered[0] && answered[1] && answered[2])
ltl live { <> [] (ALL_ANSWERED && (!row.present || row.state == DONE)) }
