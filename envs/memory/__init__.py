"""Partially observable tasks: solving them well requires memory."""

from .cartpole_pomdp import CartPolePOMDP
from .memory_chain import MemoryChain, MemoryChainParams, MemoryChainState

__all__ = ["CartPolePOMDP", "MemoryChain", "MemoryChainParams", "MemoryChainState"]
