"""MAPPO's loss (Yu et al. 2022): PPO's clipped objective for every agent, with
advantages and value targets from a centralised critic on the global state s.

    L = -E_m[min(r_i A_i, clip(r_i, 1 - eps, 1 + eps) A_i)] + c_v E_m[(V(s, i) - R_i)^2 / 2]
        - c_e E_m[H[pi(. | o_i)]]

with `r_i = pi(a_i | o_i) / pi_old(a_i | o_i)` (the actor still sees only its own
observation), `A_i` the GAE advantage of agent i's rewards under `V(s, i)` and `E_m` the
mean over agents and steps where the agent is alive (Yu et al.'s death masking).
Value clipping and advantage normalisation are among the paper's recommended
settings (its sec. 4). The function is `jaxrl.losses.agent_ppo_loss`, shared with IPPO;
tests/algorithms/test_multiagent.py checks it against hand-computed values.
"""

from jaxrl.losses import agent_ppo_loss

mappo_loss = agent_ppo_loss

__all__ = ["mappo_loss"]
