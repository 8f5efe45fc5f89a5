"""Is GRPO's policy gradient right, and how large a step does the policy tolerate?

    python benchmarks/grpo_gradient_check.py RUN_DIR   # RUN_DIR: an SFT run (its model/)

Draws 4 training prompts, samples 64 completions each at temperature 1, computes the
group-normalised advantages and the gradient of sum_i A_i log pi(y_i) / rows, then
steps the parameters along the normalised gradient by several sizes and re-samples
fresh completions for the same prompts: a correct gradient raises their accuracy for
small steps. Prints one line per step size (see benchmarks/notes/2026-11-27-lm-learning.md, "GRPO
learning").
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrl import config as cfg
from jaxrl import objectives
from jaxrl.algorithms import grpo
from jaxrl.lm import decode_completions

NUM_PROMPTS, SAMPLES = 4, 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="an SFT run directory or HF-layout model directory")
    parser.add_argument("--steps", default="0.01,0.03,0.1,0.3", help="step sizes to try")
    args = parser.parse_args()
    config = cfg.replace(
        grpo.default_config(), model=args.model, group_size=SAMPLES, num_prompts=NUM_PROMPTS
    )
    algo = grpo.make(config)
    params = algo.load_params()
    inputs, host = algo.prepare(algo.init_host_state(0, 1))
    examples = host["rollout"]["examples"][0]
    prompts, prompt_mask = jnp.asarray(inputs["tokens"][0]), jnp.asarray(inputs["mask"][0])

    def sample(p, key):
        out = algo.sample(
            p, prompts, prompt_mask, key,
            max_new_tokens=algo.max_new_tokens, temperature=1.0, num_samples=SAMPLES,
        )  # fmt: skip
        tokens, mask = out.sequences()
        texts = decode_completions(
            algo.tokenizer,
            np.asarray(tokens[:, algo.prompt_len :]),
            np.asarray(out.completion_mask),
        )
        answers = [e.answer for e in examples for _ in range(SAMPLES)]
        correct = np.array(
            [algo.task.is_correct(t, a) for t, a in zip(texts, answers, strict=True)]
        )
        return tokens, mask, out.completion_mask, correct.astype(np.float32)

    def accuracy(p) -> np.ndarray:
        runs = [sample(p, jax.random.key(100 + i))[3].reshape(NUM_PROMPTS, -1) for i in range(4)]
        return np.mean([r.mean(1) for r in runs], axis=0)

    tokens, mask, completion_mask, rewards = sample(params, jax.random.key(1))
    cmask = completion_mask.astype(jnp.float32)
    token_rewards = objectives.outcome_token_rewards(jnp.asarray(rewards), cmask)
    adv, _ = objectives.compute_advantages("grpo", token_rewards, cmask, group_size=SAMPLES)

    def objective(p):
        logp = algo.completion_logprobs(p, tokens, mask)
        return jnp.sum(adv * logp * cmask) / cmask.shape[0]

    grads = jax.grad(objective)(params)
    norm = optax.global_norm(grads)
    print(f"prompts {[e.prompt for e in examples]}  gradient norm {float(norm):.2f}")
    print(f"step 0 (fresh samples): accuracy per prompt {np.round(accuracy(params), 3)}")
    for size in map(float, args.steps.split(",")):
        stepped = jax.tree.map(lambda w, g, s=size: w + s * g / norm, params, grads)
        gain = float(objective(stepped) - objective(params))
        print(f"step {size}: objective +{gain:.3f}, accuracy {np.round(accuracy(stepped), 3)}")


if __name__ == "__main__":
    main()
