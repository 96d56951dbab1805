"""The bottom layer of the server: pieces the collector, the worker and the CLI share (how
settings read secret files, a URL safe to print). It imports none of them; all of them may
import it (docs/adr/0032-layers.md). The server distribution ships it, the exporter's
does not."""
