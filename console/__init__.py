"""nodeconsole core: host sources, the snapshot model, the collector and the CLI (headless)."""
__version__ = "0.1.0"
