"""Conformance checks of the rendered platform against upstream schemas and charts."""
