"""The algorithm contract: what an algorithm object gives the driver, and what it gets back.

Every algorithm, whatever kind of RL it does, is an object that subclasses
`Algorithm` and is handed to `jaxrl.training.driver.train(algo, run)`. The driver
owns the loop, chunking, logging, NaN checks, checkpoints, resume, the mesh and
the run directory; the algorithm owns its state, its step and its hooks. The
name registry (`"ppo" -> jaxrl.algorithms.ppo`) lives in the API/CLI layer, not
here and not in the driver.

What an algorithm provides
--------------------------
Declarations (class attributes, read by the API, CLI, summary, `jaxrl eval` and plots,
which never guess an algorithm's family from its config fields):
    trains_on          "env" (an environment: subclass `EnvironmentAlgorithm`), "task"
                       (a language-model task; pairs or prompts made on the host) or
                       "dataset" (a fixed data set: the offline family, which subclasses
                       `EnvironmentAlgorithm` too, the environment only evaluating its
                       policy). The config names it in its `env`, `task` or `dataset`
                       field (`target_name`). Whether an algorithm takes an environment
                       (`--env`, episodes in `jaxrl eval`) is whether it is an
                       `EnvironmentAlgorithm` (`acts_in_env`), not its `trains_on`.
    headline_metric    the `metrics.jsonl` column that says how well training goes
                       ("episode_return", an LM's accuracy): plotted by default and, for
                       "episode_return", summarised as `summary.json`'s `final_return_*`.
    eval_metric        the key of `evaluate`'s result that `jaxrl eval` leads with;
    eval_name          and how `eval.json` names it (default: `eval_metric`).
    eval_extra         further keys of `evaluate`'s result (shaped like `eval_metric`'s)
                       that `jaxrl eval` reports too (an offline run's normalized_score).
    multi_agent        (`EnvironmentAlgorithm`) True for algorithms of multi-agent
                       environments (`envs/multiagent/`: IPPO, MAPPO, PQN-VDN); the API
                       refuses the other kind of environment before building anything.

Attributes:
    name               registry name, recorded in `config.json`.
    config             the frozen, validated config dataclass.
    sweepable          names of the config's numeric hyperparameters that live in the
                       state as float32 leaves (`state.hparams`), so sweeps are a `vmap`.
    progress_unit      what progress counts: "env_steps", "samples", "tokens" or
                       "gradient_steps" (offline learners: no environment steps). Run
                       options given in steps (`checkpoint_every`, `log_every`) count it.
    steps_per_update   progress units one update makes, per agent.
    num_updates        updates in the whole run.
    max_rounds         staged with `respond` only: the most `collect` rounds one update
                       may run (a guard; the driver raises if `respond` asks for more).
    async_staleness    staged with `prepare` only: K >= 1 runs the sampler on its own
                       devices K policy versions behind the learner
                       (`jaxrl/training/async_stages.py`); the algorithm then provides
                       `sampler_mesh(num_devices)`, `sampler_view(state)`,
                       `async_collect(view, batch_index, inputs) -> collected` and
                       `async_learn(state, batch)`. 0 (default): synchronous.

Methods:
    hyperparams(**overrides) -> HyperParams
        The sweepable hyperparameters as a pytree of float32 scalars (validated). The
        default reads `sweepable` off the config; override it only to derive a value
        (SAC's `target_entropy=None` becomes `-action_dim`).
    init(key, hparams, params=None) -> State
        A pure, traceable function. `params` (host arrays or None) starts training
        from given parameters (a warm start; `load_params()` supplies them by default).
        The state is a pytree with at least `params` and `update_step` (an int32 count
        of completed updates).

and **one** of two kinds of step:

* **fused**: `update(state) -> (state, metrics)`, pure. The driver compiles K of
  them into one XLA program (`lax.scan`) and calls it once per chunk: nothing runs
  on the host inside a chunk. PPO, DQN, SAC and world models use this.
* **staged**: an optional `collect(state) -> (state, collected)` (pure, jitted),
  then `process(collected, host_state) -> (batch, host_state, host_metrics)` in
  plain Python on the host, then `learn(state, batch) -> (state, metrics)` (pure,
  jitted). Rewards that check answers or run model-written code in a sandbox,
  and data loaders with a cursor, live in `process`. SFT and GRPO use this.
  When the device phase needs host data first (GRPO's prompts come from a task
  on the host), an optional `prepare(host_state) -> (inputs, host_state)` runs on
  the host before it, and `collect(state, inputs)` receives them.
  **Rounds** (multi-turn episodes: an environment in Python answers between model
  turns): an optional `respond(collected, host_state) -> (inputs | None, host_state)`
  runs on the host after every `collect`; when it returns inputs, the driver calls
  `collect(state, inputs)` again (the same compiled program: the inputs keep the
  shapes `prepare` gave), up to `max_rounds` collects per update; when it returns
  None, `process` receives the last round's `collected` (the algorithm records what
  it needs of earlier rounds in `respond`). All rounds are inside one update, so
  chunks, checkpoints and resume are unchanged; `respond` must be a deterministic
  function of its arguments (and of what `prepare` drew) for resume to be exact.

`metrics` maps names to scalars (per agent). Names starting with `episode_` are
averaged weighted by the `episodes` count when an algorithm reports one; a
`tokens` count is summed and also logged as `tokens_per_second`.

Hooks, each with a default that is today's behaviour (override what you need):
    make_mesh(num_devices)                    the device mesh; default 1-D `data`.
    state_sharding(abstract, mesh, agents)    shardings of the stacked state; default:
                                              agent axis over `data`, else the
                                              `ENV_FIELDS`' environment axis, else replicated.
    batch_sharding(abstract, mesh, agents)    staged only: shardings of `learn`'s batch
                                              (and of `prepare`'s inputs to `collect`).
    checkpoint_exclude                        top-level state fields that are frozen or
                                              derivable (a reference model, a tokenizer
                                              table): not saved, not fingerprinted;
                                              `init` rebuilds them on resume.
    init_host_state(seed, num_agents)         staged only: host state (data cursor, a
                                              reward process's RNG) as a JSON value,
                                              saved in checkpoints.
    load_params() -> params | None            the warm-start parameters passed to `init`.
    nan_metrics                               metric names whose non-finite value stops
                                              the run (default `("loss",)`).
    evaluate(state, key, num_episodes)        `jaxrl eval`: per-agent results. An
                                              `EnvironmentAlgorithm` runs episodes with
                                              its `act` by default; others override it.
    check_resume(saved_config, reschedule)    which config changes a resumed run accepts;
                                              default: none but a larger `total_steps`
                                              (with `reschedule` if `schedule_follows_total`).
    early_stop(state) -> (state, stop)        between chunks, on the host: an algorithm with
                                              a goal may freeze agents that reached it (in
                                              its state, so checkpoints keep it) and end the
                                              run when all have; default `(state, False)`
                                              (e.g. SFT's `stop_at_train_accuracy`).
    finish(state, run_dir) -> dict            extra `summary.json` fields after training
                                              (e.g. SFT's held-out accuracy and its
                                              exported `model/` folder).

What the driver guarantees
--------------------------
* Agents (seeds x sweep points) are stacked on a leading axis; agent i of every
  sweep point is initialised from `fold_in(key(seed), i)`.
* Chunk boundaries (K updates) depend only on the config, so an interrupted and
  resumed run executes the same compiled programs, on the same data, as an
  uninterrupted one and ends with the same `params_fingerprint`.
* Between chunks, and only there: NaN check of `nan_metrics`, one `metrics.jsonl`
  row (means over the chunk, per agent), progress bar, TensorBoard, `early_stop`,
  checkpoints. A run that `early_stop` ends writes its checkpoint and summary as a
  finished run does (`summary.json`'s `stopped_early_at_update`); resuming it trains
  nothing more.
* Checkpoints hold the state minus `checkpoint_exclude`, as sharded arrays
  (no gather to one host), plus the host state, and a fingerprint of what they hold.

Algorithms in an environment
----------------------------
`EnvironmentAlgorithm` declares what evaluation (and any other code that rolls out a
policy) needs, instead of finding it by duck typing:
    env, env_params                           the environment and its parameters.
    act(state, obs, carry, reset, key, deterministic) -> (env_action, carry)
                                              one agent's policy on a batch of
                                              observations (see `act`).
    eval_carry(num_episodes)                  the recurrent carry evaluation episodes
                                              start from (None: feed-forward).

Declaring an algorithm in one place
-----------------------------------
A new algorithm may declare its config class and presets on the class (`Config`,
`presets`, next to `sweepable`); the registry (`jaxrl.algorithms`) then derives
`default_config` and `make` from them, so its package needs no `SWEEPABLE`,
`default_config`, `make`, `Config` alias or hyperparameter class of its own
(`jaxrl/algorithms/a2c/` is written so).

See docs/ARCHITECTURE.md for a worked example and which hooks each family uses.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import jax

from jaxrl import config as cfg
from jaxrl import envs
from jaxrl.episodes import run_episodes
from jaxrl.training import mesh as mesh_lib

Metrics = Mapping[str, jax.Array]

PROGRESS_UNITS = ("env_steps", "samples", "tokens", "gradient_steps")

# What an algorithm trains on, and the config field that names it (`target_name`).
TARGET_FIELDS = {"env": "env", "task": "task", "dataset": "dataset"}

# The phases of a staged update in the order they run (`Algorithm.phases`).
STAGED_PHASES = ("prepare", "collect", "respond", "process", "learn")


class ConfigChange(NamedTuple):
    """A change of config that lowers a step's memory per device, which `jaxrl plan`
    compiles and, if every step then fits, suggests (`Algorithm.plan_suggestions`)."""

    kind: str
    """Changes of one kind are alternatives, listed from the smallest (e.g. fsdp sizes)."""
    flags: str
    """The change as `jaxrl train` flags, e.g. `"--mesh fsdp=8"`."""
    why: str
    """What it changes, e.g. `"parameters and optimizer state sharded over 8 devices"`."""
    fields: Mapping[str, Any]
    """The config fields it sets, e.g. `{"mesh_fsdp": 8}`."""


class Algorithm:
    """Base class of every algorithm: the contract's attributes and the default hooks.

    Subclasses declare `trains_on` and `headline_metric` (and `eval_metric` when they
    override `evaluate`), set the attributes in `__init__` (they usually depend on the
    config) and implement `init` and either `update` (fused) or `learn` (staged,
    optionally with `collect` and `process`).
    """

    name: ClassVar[str] = ""
    trains_on: ClassVar[str | None] = None
    headline_metric: ClassVar[str | None] = None
    eval_metric: ClassVar[str | None] = None
    eval_name: ClassVar[str | None] = None
    eval_extra: ClassVar[tuple[str, ...]] = ()
    # Declared by algorithms written on the lighter contract (see the module docstring).
    Config: ClassVar[type | None] = None
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    config: Any
    sweepable: tuple[str, ...] = ()
    progress_unit: str = "env_steps"
    steps_per_update: int
    num_updates: int
    max_rounds: int = 1
    async_staleness: int = 0

    # State fields with a per-environment axis right after the agent axis (default sharding).
    ENV_FIELDS: ClassVar[tuple[str, ...]] = ()
    checkpoint_exclude: ClassVar[tuple[str, ...]] = ()
    nan_metrics: ClassVar[tuple[str, ...]] = ("loss",)

    # ------------------------------------------------------------------ construction
    @classmethod
    def default_config(cls, env: str | None = None) -> Any:
        """The declared `Config` (not yet validated: overrides come first). Only for
        algorithms that declare `Config`; the others' modules define `default_config`."""
        config_cls = _declared_config(cls)
        if env is not None:
            raise cfg.ConfigError(
                f"invalid env={env!r}: {cls.name} trains on a {cls.trains_on}, not an environment"
            )
        return config_cls()

    @classmethod
    def make(cls, config: Any) -> Algorithm:
        """The algorithm for `config` (validated; bad input raises `ConfigError`)."""
        return cls(config.validate())

    @classmethod
    def target_name(cls, config: Any) -> str:
        """What a run of `config` trains on, as run directories name it: the config's
        `env`, `task` or `dataset` field (`TARGET_FIELDS`; a data file by its stem)."""
        value = str(getattr(config, TARGET_FIELDS[declared(cls, "trains_on")]))
        return pathlib.Path(value).stem if cls.trains_on == "dataset" else value

    def hyperparams(self, **overrides: float) -> Any:
        """The sweepable hyperparameters of this config (with optional overrides,
        validated) as float32 leaves of a `flax.struct` dataclass."""
        config = cfg.replace(self.config, **overrides).validate() if overrides else self.config
        fields = tuple(self.sweepable)
        return cfg.hyperparams_from(config, _hyperparams_class(type(self).__name__, fields), fields)

    # ------------------------------------------------------------------ the step kind
    @property
    def phases(self) -> tuple[str, ...]:
        """The phases of one update, in the order the driver runs them.

        `("update",)` for a fused step. For a staged one, `STAGED_PHASES` less the
        optional ones this class does not implement: `prepare`, `collect` and
        `respond` run only when overridden; `process` always runs (its default
        passes `collected` through) and so does `learn`. The contract's checks, the
        driver's steppers and `jaxrl plan` all read this one answer.
        """
        cls = type(self)

        def implements(phase: str) -> bool:
            return getattr(cls, phase) is not getattr(Algorithm, phase)

        if implements("update") == implements("learn"):
            raise TypeError(
                f"{cls.__name__} must implement exactly one of update (fused step) "
                "or learn (staged step)"
            )
        if implements("update"):
            return ("update",)
        return tuple(p for p in STAGED_PHASES if p in ("process", "learn") or implements(p))

    @property
    def staged(self) -> bool:
        """True for a staged step (`learn`), False for a fused one (`update`)."""
        return self.phases != ("update",)

    def update(self, state: Any) -> tuple[Any, Metrics]:
        """Fused step: one whole update, pure and traceable. Abstract: a fused algorithm
        overrides it, a staged one overrides `learn` instead (see `staged`)."""
        raise NotImplementedError(f"{type(self).__name__} has a staged step: call learn")

    def collect(self, state: Any) -> tuple[Any, Any] | None:
        """Staged step, phase 1 (jitted). Return None (the default) when there is
        nothing to compute on the device before `process`, e.g. a data loader."""
        return None

    def prepare(self, host_state: Any) -> tuple[Any, Any]:
        """Staged step, phase 0 (host Python, optional): `(inputs, host_state)`, where
        `inputs` (numpy, leading agent axis, fixed shapes) go to `collect(state, inputs)`,
        sharded by `batch_sharding`. Override it together with a two-argument `collect`."""
        raise NotImplementedError(f"{type(self).__name__} has no prepare phase")

    def respond(self, collected: Any, host_state: Any) -> tuple[Any | None, Any]:
        """Staged step, between rounds (host Python, optional): `(inputs, host_state)`.

        Called after every `collect` with its output (numpy, leading agent axis). Return
        the next round's inputs for `collect(state, inputs)` (the shapes and dtypes of
        `prepare`'s, so one compiled program serves every round) to run another round,
        or None to go on to `process`, which gets the last round's output. At most
        `max_rounds` collects per update. Multi-turn episodes use it: the environment's
        reply to the model's turn becomes the next turn's context.
        """
        raise NotImplementedError(f"{type(self).__name__} has no respond phase")

    def process(self, collected: Any, host_state: Any) -> tuple[Any, Any, Mapping[str, Any]]:
        """Staged step, phase 2 (host Python): `(batch, host_state, host_metrics)`.

        `collected` has a leading agent axis (numpy); so must `batch`. Host metrics
        are scalars or per-agent sequences. The default passes `collected` through.
        """
        return collected, host_state, {}

    def learn(self, state: Any, batch: Any) -> tuple[Any, Metrics]:
        """Staged step, phase 3 (jitted): learn from the batch `process` returned.
        Abstract: a staged algorithm overrides it, a fused one overrides `update`."""
        raise NotImplementedError(f"{type(self).__name__} has a fused step: call update")

    # ------------------------------------------------------------------ hooks
    def make_mesh(self, num_devices: int | None) -> jax.sharding.Mesh:
        return mesh_lib.data_mesh(num_devices)

    def state_sharding(self, abstract_state: Any, mesh: jax.sharding.Mesh, num_agents: int) -> Any:
        return mesh_lib.agent_or_env_sharding(abstract_state, mesh, num_agents, self.ENV_FIELDS)

    def batch_sharding(self, abstract_batch: Any, mesh: jax.sharding.Mesh, num_agents: int) -> Any:
        return mesh_lib.agent_or_env_sharding(abstract_batch, mesh, num_agents, ())

    def init_host_state(self, seed: int, num_agents: int) -> Any:
        return None

    def load_params(self) -> Any:
        return None

    def evaluate(self, state: Any, key: jax.Array, num_episodes: int) -> dict[str, Any]:
        """`jaxrl eval`: per-agent results (arrays with a leading agent axis), keyed by
        name; `eval_metric` names the headline one. No default outside an environment."""
        raise NotImplementedError(
            f"{type(self).__name__} trains on a {self.trains_on}: it has no default "
            "evaluate (an EnvironmentAlgorithm runs episodes); override evaluate"
        )

    @property
    def eval_seed(self) -> int:
        """The seed of the evaluation `finish` reports in summary.json, and `jaxrl eval`'s
        default `--seed`, so that a default `jaxrl eval` reproduces those numbers."""
        return 0

    def held_out_size(self) -> int:
        """How many held-out examples (prompts, preference pairs) `evaluate` scores when
        asked for all of them: the set `finish` reports in summary.json, and what
        `jaxrl eval --examples` may not exceed. Environment algorithms have none (they
        run fresh episodes)."""
        raise NotImplementedError(
            f"{type(self).__name__} trains on a {self.trains_on}: it has no held-out set; "
            "override held_out_size with evaluate"
        )

    @property
    def schedule_follows_total(self) -> bool:
        """Whether a schedule (e.g. a learning rate annealed to 0 at the last update)
        is defined by `total_steps`, so that extending a run would change it."""
        return False

    def check_resume(self, saved_config: Mapping[str, Any], reschedule: bool = False) -> None:
        """Raises `ConfigError` unless this config may continue a run saved with
        `saved_config` (its `config.json` section).

        A run may be extended (a larger `total_steps`); any other change would make
        the saved state mean something else. If a schedule follows `total_steps`
        (`schedule_follows_total`), extending rescales it from the resume point on
        (an annealed learning rate rises again), so the user must say so with
        `reschedule=True` (`--reschedule`).

        A field the saved config lacks was added to the algorithm after the run
        started: the run trained as its default says (a new option is off by default),
        so it is compared with that default.
        """
        now = cfg.to_dict(self.config)
        saved_config = {**_field_defaults(self.config), **saved_config}
        diffs = cfg.field_diffs(saved_config, now, ignore=("total_steps",))
        saved_total, total = saved_config.get("total_steps"), now.get("total_steps")
        if saved_total is not None and total is not None and total < saved_total:
            diffs.append(
                f"total_steps: saved {saved_total}, now {total} (a run can be extended, "
                "not shortened)"
            )
        if diffs:
            raise cfg.ConfigError(
                "cannot resume with a different config (results would not match an "
                "uninterrupted run): " + "; ".join(diffs)
            )
        extended = saved_total is not None and total > saved_total
        if extended and self.schedule_follows_total and not reschedule:
            raise cfg.ConfigError(
                f"invalid total_steps={total}: extending this run from {saved_total} "
                "changes its learning-rate schedule, which is defined by total_steps "
                "(it would rise again from the resume point); pass reschedule=True "
                "(--reschedule) to accept that, or start a new run from its parameters"
            )

    def early_stop(self, state: Any) -> tuple[Any, bool]:
        """Called by the driver on the host after every chunk (and once on resume):
        `(state, stop)`. Freezing an agent that reached the algorithm's goal is done in
        the returned state (its `learn`/`update` then leaves it unchanged), so that
        agents of a vmapped run stop independently and a checkpoint keeps the freeze;
        `stop` True ends the run (after a checkpoint). Must be a deterministic function
        of the state, so that a resumed run stops where an uninterrupted one does."""
        return state, False

    @property
    def early_stop_reason(self) -> str:
        """Why `early_stop` ended a run, for the line the driver prints when it does."""
        return "the algorithm's goal was reached"

    def finish(self, state: Any, run_dir: Any) -> dict[str, Any]:
        return {}

    def plan_suggestions(self, num_devices: int) -> Sequence[ConfigChange]:
        """`jaxrl plan`, when a step does not fit in a device's memory: the config changes
        worth trying on `num_devices` devices, kinds in the order they should be combined.
        Each is compiled before it is shown. Default: none."""
        return ()


class EnvironmentAlgorithm(Algorithm):
    """An algorithm that acts in an environment: declares what rolls out its policy.

    Subclasses set `env` and `env_params` in `__init__` (the usual signature is
    `__init__(config, env, env_params)`, which the default `make` calls) and implement
    `act`; a recurrent policy also overrides `eval_carry`. `evaluate` then runs
    evaluation episodes (`jaxrl.episodes.run_episodes`), and `jaxrl eval` reports
    their mean return.
    """

    trains_on = "env"
    headline_metric = "episode_return"
    eval_metric = "returns"
    eval_name = "return"
    # Multi-agent algorithms (IPPO, MAPPO, PQN-VDN) train on multi-agent environments
    # (`envs/multiagent/`), the others on single-agent ones; `jaxrl.make_config` refuses
    # the other kind before anything is built.
    multi_agent: bool = False
    env: envs.Environment
    env_params: Any

    @classmethod
    def default_config(cls, env: str | None = None) -> Any:
        """The declared `Config` for `env` (default: the config's own `env`) with the
        preset `presets[env]` applied (not yet validated: overrides come first)."""
        config_cls = _declared_config(cls)
        env = env or config_cls().env
        return cfg.replace(config_cls(env=env), **cls.presets.get(env, {}))

    @classmethod
    def make(
        cls, config: Any, env: envs.Environment | None = None, env_params: Any = None
    ) -> EnvironmentAlgorithm:
        """The algorithm for `config` in `config.env` (or the given environment)."""
        if env is None:
            env, env_params = envs.make(config.env)
        return cls(config, env, env.default_params if env_params is None else env_params)

    def act(
        self,
        state: Any,
        obs: jax.Array,
        carry: Any,
        reset: jax.Array,
        key: jax.Array,
        deterministic: bool = True,
    ) -> tuple[jax.Array, Any]:
        """One agent's policy on a batch: `(env_action, carry)`.

        `state` is one agent's training state (no agent axis), `obs` a batch of raw
        observations `(B, ...)`, `carry` the recurrent state (None when feed-forward),
        `reset (B,)` whether each observation starts an episode (a recurrent carry
        restarts there), `key` the sampling key; `deterministic` takes the policy's
        mode instead of a sample. The action is in the environment's action space.
        Pure and traceable: evaluation vmaps and jits it.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement act")

    def eval_carry(self, num_episodes: int) -> Any:
        """The recurrent carry `num_episodes` evaluation episodes start from (None:
        a feed-forward policy)."""
        return None

    def evaluate(self, state: Any, key: jax.Array, num_episodes: int) -> dict[str, Any]:
        """`{"returns": (agents, num_episodes)}`: greedy episodes with `act`."""
        return {"returns": evaluate_policy(self, state, key, num_episodes)}


def _field_defaults(config: Any) -> dict[str, Any]:
    """The JSON values of a config dataclass's field defaults (fields without one are
    left out)."""
    defaults = {}
    for field in dataclasses.fields(config):
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            continue
        defaults[field.name] = list(value) if isinstance(value, tuple) else value
    return defaults


def evaluate_policy(
    algo: Algorithm, state: Any, key: jax.Array, num_episodes: int, deterministic: bool = True
) -> Any:
    """Per agent, the returns of `num_episodes` fresh episodes of `algo`'s policy,
    shape (agents, num_episodes); raises `TypeError` unless `algo` is an
    `EnvironmentAlgorithm` that implements `act`."""
    check_environment_algorithm(algo)
    return run_episodes(
        algo.env,
        algo.env_params,
        algo.act,
        algo.eval_carry,
        state,
        key,
        num_episodes,
        deterministic,
    )


def check_environment_algorithm(algo: Any) -> None:
    """Fails, naming what is missing, unless `algo` declares the environment protocol."""
    cls = type(algo)
    if not isinstance(algo, EnvironmentAlgorithm):
        raise TypeError(
            f"{cls.__name__} does not act in an environment (it trains on a "
            f"{getattr(algo, 'trains_on', None)}): episodes need an EnvironmentAlgorithm "
            "(jaxrl.training.contract) with env, env_params and act"
        )
    missing = [a for a in ("env", "env_params") if not hasattr(algo, a)]
    if cls.act is EnvironmentAlgorithm.act:
        missing.append("act")
    if missing:
        raise TypeError(f"{cls.__name__} lacks {missing} of the EnvironmentAlgorithm protocol")


def acts_in_env(cls: type) -> bool:
    """Whether algorithm class `cls` acts in an environment (an `EnvironmentAlgorithm`):
    it takes `--env` and `jaxrl eval` plays episodes with it, whether it trains there
    (`trains_on` "env") or on a dataset and is evaluated there ("dataset")."""
    return issubclass(cls, EnvironmentAlgorithm)


def declared(cls: type, attribute: str) -> Any:
    """The value of a declaration (`trains_on`, `headline_metric`, ...) of an algorithm
    class; raises `TypeError` naming it when the class leaves it undeclared or invalid."""
    value = getattr(cls, attribute, None)
    if value is None:
        raise TypeError(
            f"{cls.__name__} declares no {attribute} (a class attribute; see "
            "jaxrl/training/contract.py)"
        )
    if attribute == "trains_on" and value not in TARGET_FIELDS:
        raise TypeError(f"{cls.__name__}.trains_on={value!r}: must be one of {list(TARGET_FIELDS)}")
    return value


def _declared_config(cls: type) -> type:
    if cls.Config is None:
        raise TypeError(
            f"{cls.__name__} declares no Config: its module provides default_config and make"
        )
    return cls.Config


@functools.cache
def _hyperparams_class(algorithm: str, fields: Sequence[str]) -> type:
    """One `HyperParams` class per algorithm and field list (pytree leaves by name)."""
    return cfg.make_hyperparams_class(f"{algorithm}HyperParams", fields)


def check_algorithm(algo: Any) -> None:
    """Fails early, naming what is missing, if `algo` does not follow the contract."""
    if not isinstance(algo, Algorithm):
        raise TypeError(
            f"{type(algo).__name__} is not a jaxrl.training.contract.Algorithm subclass"
        )
    for attr in ("config", "steps_per_update", "num_updates"):
        if not hasattr(algo, attr):
            raise TypeError(f"{type(algo).__name__} has no {attr!r} (see training/contract.py)")
    if algo.progress_unit not in PROGRESS_UNITS:
        raise TypeError(
            f"{type(algo).__name__}.progress_unit={algo.progress_unit!r}: must be one of "
            f"{list(PROGRESS_UNITS)}"
        )
    phases = algo.phases  # raises when neither or both step kinds are implemented
    if isinstance(algo, EnvironmentAlgorithm):
        check_environment_algorithm(algo)
    cls = type(algo)
    if "prepare" in phases and "collect" not in phases:
        raise TypeError(f"{cls.__name__} has a prepare phase but no collect to feed")
    if "respond" in phases:
        if "prepare" not in phases:
            raise TypeError(
                f"{cls.__name__} has a respond phase but no prepare: respond's inputs go to "
                "collect(state, inputs), whose first inputs prepare makes"
            )
        rounds = algo.max_rounds
        if not (isinstance(rounds, int) and not isinstance(rounds, bool) and rounds >= 1):
            raise TypeError(f"{cls.__name__}.max_rounds={rounds!r}: must be an integer >= 1")
