"""Classic control tasks, step-for-step equal to gymnasium's."""

from .acrobot import Acrobot, AcrobotParams, AcrobotState
from .cartpole import CartPole, CartPoleParams, CartPoleState
from .continuous_mountain_car import (
    ContinuousMountainCar,
    ContinuousMountainCarParams,
    ContinuousMountainCarState,
)
from .mountain_car import MountainCar, MountainCarParams, MountainCarState
from .pendulum import Pendulum, PendulumParams, PendulumState

__all__ = [
    "Acrobot",
    "AcrobotParams",
    "AcrobotState",
    "CartPole",
    "CartPoleParams",
    "CartPoleState",
    "ContinuousMountainCar",
    "ContinuousMountainCarParams",
    "ContinuousMountainCarState",
    "MountainCar",
    "MountainCarParams",
    "MountainCarState",
    "Pendulum",
    "PendulumParams",
    "PendulumState",
]
