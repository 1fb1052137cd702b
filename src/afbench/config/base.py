"""Pieces every config section shares: the frozen, extra-forbidding base model, the name
pattern of variants/phases/experiments, the validation of environment-variable maps, and
:data:`LocalPath`."""

from __future__ import annotations

import os
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def env_vars(value: Any) -> dict[str, str]:
    """Environment variables from YAML: names must match [A-Z_][A-Z0-9_]*; scalar values
    become strings (YAML reads 1 and true as numbers and booleans)."""
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of NAME: value, got {value!r}")
    out = {}
    for name, val in value.items():
        if not ENV_NAME.fullmatch(str(name)):
            raise ValueError(f"environment variable name {name!r} must match [A-Z_][A-Z0-9_]*")
        if isinstance(val, (dict, list)) or val is None:
            raise ValueError(f"{name}: value must be a string or number, got {val!r}")
        out[str(name)] = str(val).lower() if isinstance(val, bool) else str(val)
    return out


def _absolute(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


#: A file or folder on this machine, made absolute (``~`` expanded) against the working
#: directory afbench was started in, when the config is validated: the workers run in their
#: run folders (and Hydra's jobs in their job folders under ``hydra.job.chdir=True``), so a
#: relative ``data.path`` must mean the start directory's file everywhere.
LocalPath = Annotated[str, AfterValidator(_absolute)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def valid_keys(cls) -> list[str]:
        """The keys this section accepts (its fields), for a did-you-mean."""
        return list(cls.model_fields)
