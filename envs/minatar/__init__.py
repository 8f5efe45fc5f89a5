"""The MinAtar games (Young & Tian 2019) in JAX, rule-for-rule equal to minatar 1.0.15.

Observations are 10x10xC boolean frames with minatar's channel order; actions
are each game's minimal action set (as gymnax and MinAtar's gymnasium `-v1`
ids expose them). Sticky actions and difficulty ramping are params. See
`common` for how randomness is kept apart from the rules.
"""

from .asterix import Asterix, AsterixParams, AsterixState
from .breakout import Breakout, BreakoutParams, BreakoutState
from .common import MinAtarEnvironment, MinAtarParams, MinAtarState
from .freeway import Freeway, FreewayParams, FreewayState
from .space_invaders import SpaceInvaders, SpaceInvadersParams, SpaceInvadersState

__all__ = [
    "Asterix",
    "AsterixParams",
    "AsterixState",
    "Breakout",
    "BreakoutParams",
    "BreakoutState",
    "Freeway",
    "FreewayParams",
    "FreewayState",
    "MinAtarEnvironment",
    "MinAtarParams",
    "MinAtarState",
    "SpaceInvaders",
    "SpaceInvadersParams",
    "SpaceInvadersState",
]
