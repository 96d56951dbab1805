"""afr's collector. The ingest path's modules run compiled when a current build is in place
(``collector.native``, ADR 52)."""

from collector import native as _native

_native.install()
