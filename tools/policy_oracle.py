#!/usr/bin/env python3
"""How much can any draft-length policy gain on BM_DraftLengthPolicy's changing workload?

Simulates the workload's cost model in model time (a one-row target call = 1): acceptance alpha
0.9 and 0.1 in alternating segments of 32 positions, independent per token; a round drafting m
tokens costs 1 + c m + row_cost m (c = 0.05; row_cost 0 "flat", 0.1 "+10 %/row"); 256 tokens a
generation. Prints the tokens per unit cost relative to plain decoding (cost 1 per token) of

  static K      every round drafts K (the benchmark's K = 1..8);
  clairvoyant   knows the segments: hard -> plain step, easy -> draft up to the cap (8) but not
                past the segment's end;
  clairvoyant, per round
                knows the segments and drafts the m (0..8) that maximises the round's expected
                tokens per unit cost (so one token in hard segments where that pays: flat
                costs). Higher than the first; not a proof of optimality, but no causal policy
                came near it;
  filter        causal: the two-regime filter of GoodputDraftLength (belief that the next
                position is easy; Bayes' rule per verdict, then a change with probability 1/32)
                with this workload's rates *given*, not learnt, and the same per-round rule:
                what the goodput policy's estimator could reach if it knew the text's rates;
  reactive      a causal rule tuned to this workload: draft L while the last round accepted
                its first two tokens, else plain steps with a one-token probe every P rounds.

  python3 tools/policy_oracle.py [--segment 32]

--segment sets the segments' length (the benchmark's SPECDEC_BENCH_SEGMENT); generations are
256 tokens or four segments, whichever is longer, and the filter's change probability is
1/segment (the library's filter assumes 1/32 whatever the text).
"""
import argparse
import random

SEGMENT, TOKENS, CAP, DRAFT_COST = 32, 256, 8, 0.05
ALPHA_EASY, ALPHA_HARD = 0.9, 0.1


def accepted_run(rng, position, m):
    """Drafted tokens at positions position .. position + m - 1: how many are accepted."""
    for i in range(m):
        hard = (position + i) // SEGMENT % 2 == 1
        if rng.random() >= (ALPHA_HARD if hard else ALPHA_EASY):
            return i
    return m


def speedup(choose, row_cost, generations=400, seed=1):
    """choose(position, state) -> m; state is a dict the rule may keep things in."""
    rng = random.Random(seed)
    cost = 0.0
    for _ in range(generations):
        position, state = 0, {}
        while position < TOKENS:
            m = min(choose(position, state), TOKENS - position - 1)
            accepted = accepted_run(rng, position, m)
            state["last"] = (m, accepted)
            position += accepted + 1
            cost += 1 + DRAFT_COST * m + row_cost * m
    return generations * TOKENS / cost


def static(k):
    return lambda position, state: k


def clairvoyant(position, state):
    if position // SEGMENT % 2 == 1:
        return 0
    return min(CAP, SEGMENT - position % SEGMENT)


def round_rate(alphas, row_cost):
    """argmax over m of the expected tokens / cost of a round whose i-th drafted token is
    accepted with probability alphas[i] given the ones before it (m = 0: a plain step)."""
    best_m, best, tokens, survival = 0, 1.0, 1.0, 1.0
    for m, alpha in enumerate(alphas, start=1):
        survival *= alpha
        tokens += survival
        rate = tokens / (1 + DRAFT_COST * m + row_cost * m)
        if rate > best:
            best_m, best = m, rate
    return best_m


def clairvoyant_round(row_cost):
    def choose(position, state):
        return round_rate([ALPHA_HARD if (position + i) // SEGMENT % 2 else ALPHA_EASY
                           for i in range(CAP)], row_cost)
    return choose


def known_filter(row_cost, hazard):
    def drift(b):
        return (1 - hazard) * b + hazard * (1 - b)

    def posterior(b, accepted):
        easy = ALPHA_EASY if accepted else 1 - ALPHA_EASY
        hard = ALPHA_HARD if accepted else 1 - ALPHA_HARD
        return b * easy / (b * easy + (1 - b) * hard)

    def choose(position, state):
        b = state.get("belief", 0.5)
        if "last" in state:  # fold in the last round's verdicts and positions
            m, accepted = state.pop("last")
            for i in range(min(m, accepted + 1)):
                b = drift(posterior(b, i < accepted))
            b = drift(b)
        # Expected acceptance of each further token given all before it accepted (joint).
        alphas, easy, hard = [], b, 1 - b
        for _ in range(CAP):
            survival = easy * ALPHA_EASY + hard * ALPHA_HARD
            alphas.append(survival / (easy + hard))
            easy, hard = easy * ALPHA_EASY, hard * ALPHA_HARD
            easy, hard = (1 - hazard) * easy + hazard * hard, (1 - hazard) * hard + hazard * easy
        state["belief"] = b
        return round_rate(alphas, row_cost)
    return choose


def reactive(probe_every, length):
    def choose(position, state):
        m, accepted = state.get("last", (1, 1))
        if m > 0 and (accepted == m or accepted >= 2):
            return length
        state["wait"] = state.get("wait", 0) + 1
        if state["wait"] >= probe_every:
            state["wait"] = 0
            return 1
        return 0
    return choose


def main():
    global SEGMENT, TOKENS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--segment", type=int, default=SEGMENT)
    SEGMENT = parser.parse_args().segment
    TOKENS = max(TOKENS, 4 * SEGMENT)
    for row_cost, name in ((0.0, "flat"), (0.1, "+10 %/row")):
        statics = [speedup(static(k), row_cost) for k in range(1, CAP + 1)]
        best = max(statics)
        best_k = statics.index(best) + 1
        oracle = speedup(clairvoyant, row_cost)
        oracle_round = speedup(clairvoyant_round(row_cost), row_cost)
        filtered = speedup(known_filter(row_cost, hazard=1 / SEGMENT), row_cost, seed=2)
        reactive_best = max((speedup(reactive(p, length), row_cost, seed=2), p, length)
                            for p in (1, 2, 3, 4) for length in (4, 6, 8))
        print(f"{name}: static K=1..8 " + " ".join(f"{s:.2f}" for s in statics) +
              f"; best K = {best_k}: {best:.2f}")
        print(f"  clairvoyant {oracle:.2f} ({oracle / best:.2f}x best static); reactive "
              f"(probe every {reactive_best[1]}, draft {reactive_best[2]}) {reactive_best[0]:.2f} "
              f"({reactive_best[0] / best:.2f}x)")
        print(f"  clairvoyant per round {oracle_round:.2f} ({oracle_round / best:.2f}x); filter "
              f"with the rates known {filtered:.2f} ({filtered / best:.2f}x)")


if __name__ == "__main__":
    main()
