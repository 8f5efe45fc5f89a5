"""PQN's Q-network is the shared LayerNorm Q-network of `jaxrl.nn.qnetwork` (also PQN-VDN's);
this module keeps the old import path `jaxrl.algorithms.pqn.networks` working."""

from jaxrl.nn.qnetwork import QNetwork, normalization

__all__ = ["QNetwork", "normalization"]
