"""IPPO's loss (de Witt et al. 2020): PPO's clipped objective for every agent on its own
observation, averaged over the agents alive.

    L = -E_m[min(r_i A_i, clip(r_i, 1 - eps, 1 + eps) A_i)] + c_v E_m[(V(o_i) - R_i)^2 / 2]
        - c_e E_m[H[pi(. | o_i)]]

with `r_i = pi(a_i | o_i) / pi_old(a_i | o_i)`, `A_i` agent i's GAE advantage from its
own rewards and its own critic `V(o_i)` (the independent learner's view), and `E_m` the
mean over agents and steps where the agent is alive. The function is
`jaxrl.losses.agent_ppo_loss`, shared with MAPPO, whose critic reads the global state
instead; tests/algorithms/test_multiagent.py checks it against hand-computed values.
"""

from jaxrl.losses import agent_ppo_loss

ippo_loss = agent_ppo_loss

__all__ = ["ippo_loss"]
