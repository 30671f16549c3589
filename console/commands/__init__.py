"""CLI subcommands; each module registers its own with `console.cli.subcommand`."""
