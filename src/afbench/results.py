"""Deprecated import path: the result models moved to :mod:`afbench.store` (issue 21: the store
owns every file of an output directory). Kept so that code written against
``afbench.results`` still imports; new code imports from ``afbench.store``. Remove once no
branch imports it (``grep -rn afbench.results``)."""

from afbench.store.comparison import *  # noqa: F401,F403
from afbench.store.experiment import Asset, Assets  # noqa: F401
from afbench.store.result import *  # noqa: F401,F403
from afbench.store.summary import *  # noqa: F401,F403
from afbench.store.sweep import *  # noqa: F401,F403
from afbench.store.versioning import SCHEMA_VERSION  # noqa: F401
