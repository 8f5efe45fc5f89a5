"""jaxrl: JAX-native, accelerator-first reinforcement learning.

    import jaxrl
    result = jaxrl.train("ppo", env="CartPole-v1", num_seeds=8)
    result.summary["final_return_mean"]

The public API is deliberately small; see docs/ARCHITECTURE.md for the layers.
"""

__version__ = "0.1.0"

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jaxrl import plan  # (jaxrl.plan.plan("grpo", topology="v5e:4x4"))
    from jaxrl.api import make_config, train
    from jaxrl.training.driver import RunConfig, TrainResult

__all__ = ["__version__", "train", "make_config", "plan", "RunConfig", "TrainResult"]

# `import jaxrl` imports nothing heavy: the public names (and submodules such as
# `jaxrl.envs`) are imported on first use (PEP 562). Light modules (`jaxrl.tools`,
# `jaxrl.errors`) then stay light in processes that need no JAX, such as the tool server
# that forks once per tool call.
_PUBLIC = {
    "train": ("jaxrl.api", "train"),
    "make_config": ("jaxrl.api", "make_config"),
    "RunConfig": ("jaxrl.training.driver", "RunConfig"),
    "TrainResult": ("jaxrl.training.driver", "TrainResult"),
}


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        module, attribute = _PUBLIC[name]
        value = getattr(importlib.import_module(module), attribute)
    else:
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise  # the submodule exists but something it imports does not
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
