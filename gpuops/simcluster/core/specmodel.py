"""The base of every section of a scenario file, whichever component reads it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class SpecModel(BaseModel):
    """Scenario sections: camelCase keys, unknown keys rejected, immutable once loaded."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True,
                              frozen=True)
