"""HTTP server: OpenAI- and Anthropic-compatible API over the engine protocol."""

from hinfer.server.app import create_app

__all__ = ["create_app"]
