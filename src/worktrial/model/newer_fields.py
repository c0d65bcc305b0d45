"""Fields added to a stored or published format after it first shipped are left out of its JSON while they hold
their default, so a run that uses none of them is written byte for byte as older worktrial wrote it (signatures of
stored records hold, published envelopes compare equal, readers of the older shape see nothing new)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, SerializerFunctionWrapHandler, model_serializer


class NewerFieldsOmitted(BaseModel):
    """A model whose ``NEWER_FIELDS`` are absent from its JSON while they equal their default."""

    NEWER_FIELDS: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_newer_fields_at_their_default(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        fields = type(self).model_fields
        for name in self.NEWER_FIELDS:
            if getattr(self, name) == fields[name].get_default(call_default_factory=True):
                data.pop(name, None)
        return data
