"""JAX-native environments for jaxrl, imported as `jaxrl.envs`.

    from jaxrl import envs
    env, params = envs.make("CartPole-v1")
    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

What lives here: the environment API (`core`), spaces, the registry, the
built-in environments (classic control, MinAtar, partially observable tasks,
multi-agent MPE), wrappers, and adapters to and from other libraries (gymnax,
Brax, gymnasium, JaxMARL).
What does not: anything about agents or training (that is `jaxrl`).
"""

from . import spaces
from .core import Environment, EnvParams, EnvState
from .registry import EnvSpec, is_multi_agent, make, register, registered, spec

__all__ = [
    "Environment",
    "EnvParams",
    "EnvState",
    "EnvSpec",
    "is_multi_agent",
    "make",
    "register",
    "registered",
    "spaces",
    "spec",
]

_BUILTINS = [
    # (id, entry point, description)
    ("CartPole-v1", "jaxrl.envs.classic.cartpole:CartPole", "balance a pole on a cart (discrete)"),
    ("Acrobot-v1", "jaxrl.envs.classic.acrobot:Acrobot", "swing a two-link arm up (discrete)"),
    ("MountainCar-v0", "jaxrl.envs.classic.mountain_car:MountainCar", "drive up a hill (discrete)"),
    (
        "MountainCarContinuous-v0",
        "jaxrl.envs.classic.continuous_mountain_car:ContinuousMountainCar",
        "drive up a hill (continuous)",
    ),
    ("Pendulum-v1", "jaxrl.envs.classic.pendulum:Pendulum", "swing a pendulum up (continuous)"),
    ("Breakout-MinAtar", "jaxrl.envs.minatar.breakout:Breakout", "MinAtar Breakout, 10x10x4"),
    ("Asterix-MinAtar", "jaxrl.envs.minatar.asterix:Asterix", "MinAtar Asterix, 10x10x4"),
    ("Freeway-MinAtar", "jaxrl.envs.minatar.freeway:Freeway", "MinAtar Freeway, 10x10x7"),
    (
        "SpaceInvaders-MinAtar",
        "jaxrl.envs.minatar.space_invaders:SpaceInvaders",
        "MinAtar Space Invaders, 10x10x6",
    ),
    (
        "CartPole-POMDP-v1",
        "jaxrl.envs.memory.cartpole_pomdp:CartPolePOMDP",
        "CartPole with velocities hidden (needs memory)",
    ),
    (
        "MemoryChain-v0",
        "jaxrl.envs.memory.memory_chain:MemoryChain",
        "recall a cue shown `memory_length` steps earlier",
    ),
]

for _env_id, _entry_point, _description in _BUILTINS:
    register(_env_id, _entry_point, description=_description)
del _env_id, _entry_point, _description

# Multi-agent environments (`envs/multiagent/`: stacked per-agent arrays).
register(
    "SimpleSpread-MPE",
    "jaxrl.envs.multiagent.simple_spread:SimpleSpread",
    description="MPE simple_spread: 3 agents cover 3 landmarks (multi-agent)",
    multi_agent=True,
)
