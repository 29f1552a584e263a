"""The one error type of the NAC container and its text form."""

from __future__ import annotations

__all__ = ["NacFormatError"]


class NacFormatError(ValueError):
    """A ``.nac`` file (or its text form) is malformed.

    The message names where: section, field, byte offset and the offending value for
    binary files; ``file:line:column`` for the text form.

    Attributes
    ----------
    section, field : str or None
    offset : int or None
        Absolute byte offset in the file.
    value : object
    """

    def __init__(self, message, *, section=None, field=None, offset=None, value=None,
                 path=None):
        self.section, self.field, self.offset, self.value = section, field, offset, value
        where = []
        if path is not None:
            where.append(str(path))
        if section is not None:
            where.append(f"section {section.strip()}")
        if field is not None:
            where.append(f"field {field}")
        if offset is not None:
            where.append(f"offset {offset} ({offset:#x})")
        if value is not None:
            where.append(f"value {value!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
