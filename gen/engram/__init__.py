"""Engram's protobuf stubs and its Python client (engram.client)."""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
