"""The expected values of tests/rl/test_ppo_loss.cpp: TRL's experimental PPOTrainer arithmetic
(trl/experimental/ppo/ppo_trainer.py, the rollout's steps 3-6 and the micro-batch loss),
transcribed step for step on padded rows as TRL runs it (padding_mask, padding_mask_p1,
INVALID_LOGPROB, actual_end), in plain Python so that it runs anywhere:
    python3 tools/goldens/ppo_cases.py
"""

import math

INVALID_LOGPROB = 1.0


def masked_mean(x, m):
    return sum(a for row, mr in zip(x, m) for a, k in zip(row, mr) if k) / sum(
        k for mr in m for k in mr)


def masked_whiten(x, m, shift_mean=True):
    mean = masked_mean(x, m)
    var = masked_mean([[(a - mean) ** 2 for a in row] for row in x], m)
    count = sum(k for mr in m for k in mr)
    var *= count / (count - 1)
    out = [[(a - mean) / math.sqrt(var + 1e-8) for a in row] for row in x]
    if not shift_mean:
        out = [[a + mean for a in row] for row in out]
    return out


def rollout(T, lengths, logp, ref, values, scores, kl_coef, estimator, whiten_rewards, gamma,
            lam):
    B = len(lengths)
    seq = [n - 1 for n in lengths]
    pad = [[t > seq[i] for t in range(T)] for i in range(B)]
    pad1 = [[t > seq[i] + 1 for t in range(T)] for i in range(B)]
    logp = [[INVALID_LOGPROB if pad[i][t] else logp[i][t] for t in range(T)] for i in range(B)]
    ref = [[INVALID_LOGPROB if pad[i][t] else ref[i][t] for t in range(T)] for i in range(B)]
    values = [[0.0 if pad1[i][t] else values[i][t] for t in range(T)] for i in range(B)]
    logr = [[ref[i][t] - logp[i][t] for t in range(T)] for i in range(B)]
    kl = [[-a if estimator == "k1" else math.exp(a) - 1 - a for a in row] for row in logr]
    nsr = [[-kl_coef * a for a in row] for row in kl]
    rewards = [list(row) for row in nsr]
    for i in range(B):
        end = seq[i] + 1 if seq[i] + 1 < T else seq[i]
        rewards[i][end] += scores[i]
    if whiten_rewards:
        rewards = masked_whiten(rewards, [[not p for p in row] for row in pad1], shift_mean=False)
        rewards = [[0.0 if pad1[i][t] else rewards[i][t] for t in range(T)] for i in range(B)]
    adv = [[0.0] * T for _ in range(B)]
    for i in range(B):
        last = 0.0
        for t in reversed(range(T)):
            nextv = values[i][t + 1] if t < T - 1 else 0.0
            delta = rewards[i][t] + gamma * nextv - values[i][t]
            last = delta + gamma * lam * last
            adv[i][t] = last
    returns = [[adv[i][t] + values[i][t] for t in range(T)] for i in range(B)]
    adv = masked_whiten(adv, [[not p for p in row] for row in pad])
    adv = [[0.0 if pad[i][t] else adv[i][t] for t in range(T)] for i in range(B)]
    ragged = lambda x, m: [x[i][t] for i in range(B) for t in range(T) if not m[i][t]]
    return {
        "kl": ragged(kl, pad),
        "rewards": ragged(rewards, pad1),
        "advantages": ragged(adv, pad),
        "returns": ragged(returns, pad1),
        "mean_kl": sum(sum(row) for row in kl) / B,
        "mean_non_score_reward": sum(sum(row) for row in nsr) / B,
    }


def policy_loss(logp, old, adv, cliprange):
    ratio = [math.exp(a - b) for a, b in zip(logp, old)]
    l1 = [-a * r for a, r in zip(adv, ratio)]
    l2 = [-a * min(max(r, 1 - cliprange), 1 + cliprange) for a, r in zip(adv, ratio)]
    n = len(logp)
    return (sum(max(a, b) for a, b in zip(l1, l2)) / n, sum(b > a for a, b in zip(l1, l2)) / n,
            0.5 * sum((a - b) ** 2 for a, b in zip(logp, old)) / n)


def value_loss(v, old, ret, c):
    clipped = [min(max(a, o - c), o + c) for a, o in zip(v, old)]
    l1 = [(a - r) ** 2 for a, r in zip(v, ret)]
    l2 = [(a - r) ** 2 for a, r in zip(clipped, ret)]
    n = len(v)
    return 0.5 * sum(max(a, b) for a, b in zip(l1, l2)) / n, sum(b > a for a, b in zip(l1, l2)) / n


CASE = dict(
    T=4,
    lengths=[2, 4, 3],
    logp=[[-1.0, -0.5, 9, 9], [-2.0, -0.3, -0.7, -1.1], [-0.2, -0.9, -1.4, 9]],
    ref=[[-1.2, -0.4, 9, 9], [-1.5, -0.6, -0.7, -1.0], [-0.3, -1.0, -1.1, 9]],
    values=[[0.1, 0.4, 0.3, 9], [0.2, -0.1, 0.5, 0.6], [0.0, 0.3, -0.2, 0.7]],
    scores=[1.0, -0.5, 2.0],
)

if __name__ == "__main__":
    for estimator, whiten, gamma, lam in (("k1", False, 1.0, 0.95), ("k3", True, 0.9, 0.8)):
        out = rollout(**CASE, kl_coef=0.05, estimator=estimator, whiten_rewards=whiten,
                      gamma=gamma, lam=lam)
        print(f"{estimator} whiten={whiten} gamma={gamma} lam={lam}")
        for k, v in out.items():
            print(f"  {k}: {v!r}")
    print("policy", policy_loss([-1.0, -0.5, -2.0, -0.3], [-1.3, -0.5, -1.9, -0.6],
                                [0.8, -0.4, -1.2, 0.5], 0.2))
    print("value", value_loss([0.1, 0.9, -0.4, 0.4], [0.2, 0.5, -0.1, 0.0],
                              [0.6, 0.0, 0.2, 0.5], 0.2))
