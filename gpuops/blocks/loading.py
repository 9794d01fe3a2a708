"""Load a saved Block document by name, with errors a person can act on.

Prefect answers a bad document with "Unable to load 'x' ... due to failed validation" and a
chained pydantic error that quotes every input value (a Block may hold a secret, or the text
of a file). Here a missing Block is a `BlockNotFound` and a bad one a `BlockError`, each
naming the Block's type and name and the field, never a value, and chaining nothing.
"""

from __future__ import annotations

from typing import TypeVar, cast

from prefect.blocks.core import Block
from pydantic import ValidationError

from gpuops.common.errors import BlockError, BlockNotFound
from gpuops.common.yamlsource import dotted_field, ordered_errors

B = TypeVar("B", bound=Block)


async def load_block(block_cls: type[B], name: str | None) -> B:
    """The saved Block document `name`, or the settings default when `name` is empty (the
    Block class's `from_settings()`; one without it needs a name)."""
    slug = block_cls.get_block_type_slug()
    if not name:
        from_settings = getattr(block_cls, "from_settings", None)
        if from_settings is None:
            raise BlockNotFound(slug, "", "name", "this Block has no default from settings: "
                                "name a saved Block")
        return cast(B, from_settings())
    try:
        return await block_cls.aload(name)
    except ValueError as e:
        if "Unable to find block document" not in str(e):
            raise
        raise BlockNotFound(slug, name, "name", "no such Block is saved on the Prefect server; "
                            f"create it in the Prefect UI (Blocks) or with "
                            f"`{block_cls.__name__}(...).save({name!r})`") from None
    except RuntimeError as e:
        if not isinstance(e.__cause__, ValidationError):
            raise
        raise invalid_block(slug, name, e.__cause__) from None


def invalid_block(slug: str, name: str, error: ValidationError) -> BlockError:
    """The first problem of a Block document, by field, without the values."""
    problems = ordered_errors(error)
    first = problems[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    if len(problems) > 1:
        message += f" (and {len(problems) - 1} more problem{'s' * (len(problems) > 2)})"
    return BlockError(slug, name, dotted_field(first["loc"]), message
                      + "; fix the Block in the Prefect UI (Blocks) or save it again")
