"""User-facing errors: one line, no traceback unless --debug."""

from __future__ import annotations


class HinferError(Exception):
    """An error whose message alone tells the user what is wrong (file, tensor, flag)."""


class ConfigError(HinferError):
    """config.json is missing, unsupported or inconsistent."""


class CheckpointError(HinferError):
    """A checkpoint file is missing, truncated or has a tensor of the wrong name, shape or dtype."""


class TemplateError(HinferError):
    """The chat template failed to render (raise_exception, syntax error, bad messages)."""


class PlanError(HinferError):
    """The memory plan does not fit the device."""


class ImageError(HinferError):
    """An image input cannot be used: undecodable, of an unsupported format, or outside the size limits."""
