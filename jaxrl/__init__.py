"""jaxrl: JAX-native, accelerator-first reinforcement learning.

    import jaxrl
    result = jaxrl.train("ppo", env="CartPole-v1", num_seeds=8)
    result.summary["final_return_mean"]

The public API is deliberately small; see docs/ARCHITECTURE.md for the layers.
"""

__version__ = "0.1.0"

from jaxrl import plan  # noqa: E402  (jaxrl.plan.plan("grpo", topology="v5e:4x4"))
from jaxrl.api import make_config, train  # noqa: E402
from jaxrl.training.driver import RunConfig, TrainResult  # noqa: E402

__all__ = ["__version__", "train", "make_config", "plan", "RunConfig", "TrainResult"]
